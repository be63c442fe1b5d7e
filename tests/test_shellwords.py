"""The guard's shell lexer reads a command line as the shell would: words without their quotes,
expansions kept apart, commands split at operators, here-documents attached to their command."""

from __future__ import annotations

from autoresearch_mcp.shellwords import LIT, OTHER, SUB, VAR, Command, split


def commands(text: str) -> list[Command]:
    return [item for item in split(text) if isinstance(item, Command)]


def test_quotes_make_one_word_of_data_and_escapes_are_removed() -> None:
    (cmd,) = commands('grep -rn "git commit" g\\it \'a b\'c')
    assert [w.literal() for w in cmd.words] == ["grep", "-rn", "git commit", "git", "a bc"]
    assert [w.quoted for w in cmd.words] == [False, False, True, True, True]


def test_expansions_stay_parts_of_their_word() -> None:
    (cmd,) = commands('x$HOME"${A:-b}"$(echo "c)" d)`pwd`$((1+2))$1')
    assert cmd.words[0].parts == [(LIT, "x", False), (VAR, "HOME", False), (VAR, "A:-b", True),
                                  (SUB, 'echo "c)" d', False), (SUB, "pwd", False), (OTHER, "$((1+2))", False),
                                  (OTHER, "$1", False)]
    assert cmd.words[0].literal() is None


def test_ansi_c_strings_are_decoded() -> None:
    (cmd,) = commands("$'\\x67it' $'a\\tb\\101'")
    assert [w.literal() for w in cmd.words] == ["git", "a\tbA"]


def test_operators_end_commands_and_subshells_are_marked() -> None:
    items = split("a && (cd x; b) | c 2>/dev/null\nd # e f")
    shown = [i if isinstance(i, str) else ([w.literal() for w in i.words], i.end) for i in items]
    assert shown == [(["a"], "&&"), "(", (["cd", "x"], ";"), (["b"], ";"), ")", (["c"], "\n"), (["d"], "")]
    c = [i for i in items if isinstance(i, Command)][3]
    assert [(op, w.literal()) for op, w in c.redirects] == [(">", "/dev/null")]  # the 2 is a descriptor


def test_here_documents_belong_to_their_command_and_expand_unless_quoted() -> None:
    cat, bash, python, ls = commands("cat <<EOF | bash\ngit $(echo commit)\nEOF\npython3 - <<'X'\n$(no)\nX\nls")
    assert [h.parts for h in cat.heredocs] == [[(LIT, "git ", True), (SUB, "echo commit", True), (LIT, "\n", True)]]
    assert bash.words[0].literal() == "bash" and not bash.heredocs and cat.end == "|"
    assert [h.literal() for h in python.heredocs] == ["$(no)\n"]
    assert ls.words[0].literal() == "ls"


def test_process_substitution_runs_a_command() -> None:
    (cmd,) = commands("diff <(git show a) b")
    assert cmd.words[1].parts == [(SUB, "git show a", False)]
