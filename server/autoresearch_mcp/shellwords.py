"""Shell words: a small lexer of POSIX shell (and bash) command lines, to see what a command runs.

It splits a command line into simple commands with the operators between them, each into its words,
redirections and here-documents. A word keeps what the shell would expand as parts of their own (a
variable, a command substitution's script, any other expansion), so a reader resolves what it can
and knows what it cannot; quotes and escapes are removed as the shell removes them. It never runs
anything. Standard library only, and Python 3.8 syntax: the PreToolUse guard (guard.py) runs it with
the system python3.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported: the hook runs this before every Bash call

LIT, VAR, SUB, OTHER = "lit", "var", "sub", "other"  # a part: literal text, ${...} or $NAME, $(...) or `...`, any other
# Longest first: the lexer takes the first that matches.
OPERATORS = ("&>>", "<<<", "<<-", "&&", "||", ";;", "|&", "&>", ">>", ">|", ">&", "<&", "<>", "<<", ";", "&", "|",
             "(", ")", "<", ">")
REDIRECTIONS = frozenset({"<", ">", ">>", ">|", "&>", "&>>", "<>", ">&", "<&", "<<<"})
SEPARATORS = frozenset({";", "&", "&&", "||", "|", "|&", ";;", "\n"})
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "f": "\f", "v": "\v", "\\": "\\",
            "'": "'", '"': '"', "?": "?"}


class Word:
    """One word: its parts, each (kind, text, quoted), and the text it was written as."""

    def __init__(self) -> None:
        self.parts: list[tuple[str, str, bool]] = []
        self.raw = ""

    @property
    def quoted(self) -> bool:
        return any(q for _, _, q in self.parts)

    def literal(self) -> str | None:
        """The word's text when nothing in it is expanded, else None."""
        if any(kind != LIT for kind, _, _ in self.parts):
            return None
        return "".join(text for _, text, _ in self.parts)

    def add(self, kind: str, text: str, quoted: bool) -> None:
        if kind == LIT and self.parts and self.parts[-1][0] == LIT and self.parts[-1][2] == quoted:
            self.parts[-1] = (LIT, self.parts[-1][1] + text, quoted)
        else:
            self.parts.append((kind, text, quoted))

    def __repr__(self) -> str:
        return f"Word({self.raw!r})"


class Command:
    """A simple command: its words, its redirections (operator, target) and here-documents (a here-document
    whose delimiter was quoted is literal; another one is a word of its own, expansions included); `end`
    is the operator that ends it (a separator, a newline, or the end of the text)."""

    def __init__(self) -> None:
        self.words: list[Word] = []
        self.redirects: list[tuple[str, Word]] = []
        self.heredocs: list[Word] = []
        self.end = ""

    def __repr__(self) -> str:
        return f"Command({[w.raw for w in self.words]!r}, end={self.end!r})"


if TYPE_CHECKING:  # the system python3 that runs the guard may predate `X | Y` at run time
    Item = Command | str  # a command, or "(" / ")" around a subshell


def split(text: str) -> list[Item]:
    """The simple commands of a shell command line, with "(" and ")" where a subshell opens and closes."""
    return _Lexer(text).run()


class _Lexer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.items: list[Item] = []
        self.command = Command()
        self.word: Word | None = None
        self.word_start = 0
        self.pending: str | None = None  # a redirection or here-document operator waiting for its word
        self.heredocs: list[tuple[str, bool, bool, Command]] = []  # delimiter, strip tabs, expands, command

    def run(self) -> list[Item]:
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c in " \t\r":
                self.end_word()
                self.pos += 1
            elif c == "\\" and text.startswith("\\\n", self.pos):
                self.pos += 2
            elif c == "\n":
                self.end_word()
                self.end_command("\n")
                self.pos += 1
                self.read_heredocs()
            elif c == "#" and self.word is None:
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            elif c in ";&|()<>":
                self.operator()
            else:
                self.word_part()
        self.end_word()
        self.end_command("")
        return self.items

    # --- words ----------------------------------------------------------------------------------------

    def current(self) -> Word:
        if self.word is None:
            self.word = Word()
            self.word_start = self.pos
        return self.word

    def word_part(self) -> None:
        text, c = self.text, self.text[self.pos]
        word = self.current()
        if c == "'":
            end = text.find("'", self.pos + 1)
            end = len(text) if end < 0 else end
            word.add(LIT, text[self.pos + 1:end], True)
            self.pos = end + 1
        elif c == '"':
            self.pos = _double_quoted(text, self.pos + 1, '"', word)
        elif c == "$" and text.startswith("$'", self.pos):
            self.pos = self.ansi_c(word, self.pos + 2)
        elif c == "$" and text.startswith('$"', self.pos):
            self.pos = _double_quoted(text, self.pos + 2, '"', word)
        elif c == "$":
            self.pos = _dollar(text, self.pos, False, word)
        elif c == "`":
            self.pos = _backtick(text, self.pos, False, word)
        elif c == "\\":
            word.add(LIT, text[self.pos + 1:self.pos + 2], True)
            self.pos += 2
        else:
            word.add(LIT, c, False)
            self.pos += 1

    def ansi_c(self, word: Word, pos: int) -> int:
        text, out = self.text, []
        while pos < len(text) and text[pos] != "'":
            if text[pos] == "\\" and pos + 1 < len(text):
                nxt = text[pos + 1]
                if nxt == "x":
                    digits = _run_of(text, pos + 2, "0123456789abcdefABCDEF", 2)
                    out.append(chr(int(digits, 16)) if digits else "\\x")
                    pos += 2 + len(digits)
                    continue
                if nxt in "01234567":
                    digits = _run_of(text, pos + 1, "01234567", 3)
                    out.append(chr(int(digits, 8)))
                    pos += 1 + len(digits)
                    continue
                out.append(_ESCAPES.get(nxt, "\\" + nxt))
                pos += 2
                continue
            out.append(text[pos])
            pos += 1
        word.add(LIT, "".join(out), True)
        return pos + 1

    def end_word(self) -> None:
        word, self.word = self.word, None
        if word is None:
            return
        word.raw = self.text[self.word_start:self.pos]
        op, self.pending = self.pending, None
        if op in ("<<", "<<-"):
            delimiter = "".join(text for _, text, _ in word.parts)
            self.heredocs.append((delimiter, op == "<<-", not word.quoted, self.command))
        elif op is not None:
            self.command.redirects.append((op, word))
        else:
            self.command.words.append(word)

    # --- operators and commands ---------------------------------------------------------------------------

    def operator(self) -> None:
        text = self.text
        op = next(o for o in OPERATORS if text.startswith(o, self.pos))
        if op in ("<", ">") and text.startswith("(", self.pos + 1):  # <(...) and >(...) run a command
            word = self.current()
            end = _closing(text, self.pos + 2)
            word.add(SUB, text[self.pos + 2:end], False)
            self.pos = end + 1
            return
        if (op in REDIRECTIONS or op in ("<<", "<<-")) and self.word is not None \
                and (self.word.literal() or "x").isdigit() and not self.word.quoted:
            self.word = None  # a file descriptor number (2>/dev/null), not a word
        self.end_word()
        self.pos += len(op)
        if op in REDIRECTIONS or op in ("<<", "<<-"):
            self.pending = op
        elif op in ("(", ")"):
            self.end_command(";" if op == ")" else "")
            self.items.append(op)
        else:
            self.end_command(op)

    def end_command(self, op: str) -> None:
        cmd = self.command
        cmd.end = op
        if cmd.words or cmd.redirects or any(c is cmd for _, _, _, c in self.heredocs):
            self.items.append(cmd)
        self.command = Command()
        self.pending = None

    def read_heredocs(self) -> None:
        text = self.text
        for delimiter, strip, expands, cmd in self.heredocs:
            lines = []
            while self.pos < len(text):
                end = text.find("\n", self.pos)
                end = len(text) if end < 0 else end
                line = text[self.pos:end]
                self.pos = end + 1
                if (line.lstrip("\t") if strip else line) == delimiter:
                    break
                lines.append(line.lstrip("\t") if strip else line)
            body = "".join(line + "\n" for line in lines)
            word = Word()
            word.raw = body
            if expands:
                _double_quoted(body, 0, None, word)
            else:
                word.add(LIT, body, True)
            cmd.heredocs.append(word)
        self.heredocs = []


# --- the pieces of a word, shared by words and here-documents ------------------------------------------


def _double_quoted(text: str, pos: int, close: str | None, word: Word) -> int:
    """Read a double-quoted string (or, with no `close`, a here-document's body) from `pos` into `word`."""
    while pos < len(text):
        c = text[pos]
        if close is not None and c == close:
            return pos + 1
        if c == "\\" and pos + 1 < len(text) and text[pos + 1] in "$`\"\\\n":
            if text[pos + 1] != "\n":
                word.add(LIT, text[pos + 1], True)
            pos += 2
        elif c == "$":
            pos = _dollar(text, pos, True, word)
        elif c == "`":
            pos = _backtick(text, pos, True, word)
        else:
            word.add(LIT, c, True)
            pos += 1
    if close is None:
        word.add(LIT, "", True)
    return pos


def _dollar(text: str, pos: int, quoted: bool, word: Word) -> int:
    """Read the expansion at `text[pos] == "$"` into `word`."""
    nxt = text[pos + 1:pos + 2]
    if text.startswith("$((", pos):  # arithmetic
        end = _closing(text, pos + 3)
        end = end + 1 if text.startswith(")", end + 1) else end
        word.add(OTHER, text[pos:end + 1], quoted)
        return end + 1
    if nxt == "(":
        end = _closing(text, pos + 2)
        word.add(SUB, text[pos + 2:end], quoted)
        return end + 1
    if nxt == "{":
        end = _closing(text, pos + 2, "{", "}")
        word.add(VAR, text[pos + 2:end], quoted)
        return end + 1
    if nxt.isalpha() or nxt == "_":
        name = _run_of(text, pos + 1, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
        word.add(VAR, name, quoted)
        return pos + 1 + len(name)
    if nxt and nxt in "0123456789@*#?$!-":
        word.add(OTHER, text[pos:pos + 2], quoted)
        return pos + 2
    word.add(LIT, "$", quoted)
    return pos + 1


def _backtick(text: str, pos: int, quoted: bool, word: Word) -> int:
    out, pos = [], pos + 1
    while pos < len(text) and text[pos] != "`":
        if text[pos] == "\\" and pos + 1 < len(text) and text[pos + 1] in "`$\\":
            out.append(text[pos + 1])
            pos += 2
        else:
            out.append(text[pos])
            pos += 1
    word.add(SUB, "".join(out), quoted)
    return pos + 1


def _closing(text: str, pos: int, opening: str = "(", closing: str = ")") -> int:
    """The index of the bracket that closes the one before `pos` (quotes and nesting skipped), or the end."""
    depth = 1
    while pos < len(text):
        c = text[pos]
        if c == "\\":
            pos += 2
            continue
        if c == "'" and opening == "(":
            end = text.find("'", pos + 1)
            pos = len(text) if end < 0 else end + 1
            continue
        if c == '"':
            scratch = Word()
            pos = _double_quoted(text, pos + 1, '"', scratch)
            continue
        if c == opening:
            depth += 1
        elif c == closing:
            depth -= 1
            if depth == 0:
                return pos
        pos += 1
    return len(text)


def _run_of(text: str, pos: int, chars: str, most: int = 1 << 30) -> str:
    end = pos
    while end < len(text) and text[end] in chars and end - pos < most:
        end += 1
    return text[pos:end]
