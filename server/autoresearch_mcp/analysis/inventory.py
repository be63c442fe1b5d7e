"""What one backend's source implements: ops, fusions, SIMD/ISA families and kernel functions.

Everything is read from code with comments and string literals blanked (`codescan`), so a
commented-out fusion or an op name in a log message never counts. The op enum's naming family
(`GGML_OP_`, `GGML_UNARY_OP_`, `OP_`, `OpType::`...) is detected from the case labels of all
backends, not hard-coded.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from dataclasses import dataclass, field

from autoresearch_mcp.analysis.backends import BackendRoot
from autoresearch_mcp.analysis.brackets import callee_around, matching, opener, split_top, statement
from autoresearch_mcp.analysis.codescan import CASE, Evidence, Scan, glued

_OP_SEGMENTS = frozenset({"OP", "OPS", "OPCODE", "OPTYPE", "OPERATION", "OPERATOR"})
_SCOPED_OP = re.compile(r"^(\w*(?:op|Op|OP)(?:code|Code|type|Type|eration|erator|s)?)::\w+$")
_NOT_OPS = frozenset({"COUNT", "NONE", "MAX", "FIRST", "LAST", "END", "NUM", "N", "INVALID", "UNKNOWN",
                      "BEGIN", "Count", "None", "Max", "kCount", "kNone"})
_GPU_KERNEL = re.compile(
    r"(?:__global__|kernel\s+void|@compute[^\n]*\n?\s*(?:@\w+\([^)]*\)\s*)*fn)"
    r"(?:\s+(?:__launch_bounds__\([^)]*\)|static|inline|void))*\s+([A-Za-z_]\w*)\s*[(<]"
)
_SHADER_SUFFIXES = (".comp", ".glsl", ".hlsl")
# the pieces the patterns below share: an identifier; a name that may be scoped (`GGML_OP_ADD`, `OpType::Add`);
# an op as a list or an assignment names it (`GGML_OP_ADD`, `node->op`)
_NAME = r"[A-Za-z_]\w*"
_SCOPED = r"[A-Za-z_][\w:]*"
_OP_REF = _SCOPED + r"(?:->\w+)?"
_LIST = re.compile(r"\{\s*((?:" + _OP_REF + r"\s*,\s*)+" + _OP_REF + r")\s*,?\s*\}")
_SUBLIST = re.compile(r"\s*,\s*\{\s*(" + _SCOPED + r"(?:\s*,\s*" + _SCOPED + r")*)\s*,?\s*\}")
_LIST_NAME = re.compile(r"(?:#\s*define\s+|\b)(" + _NAME + r")\s*(?:\[[^\]\n]*\]\s*)?=?\s*$")
# `ops.insert(ops.end(), { A, B })`: a list handed to a method of a named container
_RECEIVER = re.compile(r"\b(" + _NAME + r")\s*(?:\.|->)\s*\w+\s*\((?:[^;{}()]|\([^;{}()]*\))*\Z")
# `ops[1] = B;`, and `ops[i] = A;` (a loop filling the array with one op)
_ELEM = re.compile(r"\[\s*(\d+|" + _NAME + r")\s*\]\s*=\s*(" + _OP_REF + r")\s*;")
# std::fill(ops, ops + 8, A), std::fill_n(ops, n, A) (no leading \b: a literal start is scanned for fast)
_FILL = re.compile(r"fill(?:_n)?\s*\(\s*(" + _NAME + r")[^;{}]*,\s*(" + _SCOPED + r"(?:->op)?)\s*\)\s*;")
# `x = A;`, `x = flag ? A : B;`: the ops a variable may hold
_ASSIGNED = r"\s*=(?!=)\s*([^;{}]*);"
_ALTERNATIVES = re.compile(r"(?<!:):(?!:)")
# `node->op == A`, `nodes[i + 1]->op == B`, `node.op() == C`: an op test (the `->` or `.` before is checked
# after: a literal start is scanned for fast), and the node it tests
_OP_TEST = re.compile(r"op\b\s*(?:\(\s*\))?\s*==\s*(" + _SCOPED + ")")
_SUBJECT = re.compile(_NAME + r"(?:\s*(?:->|\.)\s*" + _NAME + r"|\s*\[[^\[\]\n]*\])*\s*(?:->|\.)\Z")
_CONTROL = re.compile(r"\b(?:if|while|for|else|do)\s*\Z")  # a block opened by these keeps its guard's tests
_ELEM_NAME = re.compile("(" + _NAME + r")\s*\Z")
_FUSION_STRING = re.compile(r"\b\w*fus\w*\s*(?:=|\()\s*\"([A-Za-z][A-Za-z0-9_]*)\"", re.IGNORECASE)
_SUPPORTS_FN = re.compile(r"(?i)supports?_?op|op_?supported|is_?supported_?op")
_REJECT = re.compile(r"((?:\bcase\s+" + _SCOPED + r"\s*:\s*)+)\{?\s*return\s+false\s*;")
_CASE_ONLY = re.compile(r"case\s+" + _NAME + r"(?:::\w+)*\s*:\s*")
_DEFAULT = re.compile(r"\bdefault\s*:\s*\{?\s*return\s+(true|false)\s*;")
_STMT_START = re.compile(r"[;{}][^;{}]*$")
# `for (ggml_op op : { A, B })`: the list is iterated, each op on its own, not matched as a chain
_RANGE_FOR = re.compile(r"\bfor\s*\([^;{}]*[^:]:\s*$")
_WORD = re.compile(_NAME)
_ENUM = re.compile(r"enum\s+(class\s+|struct\s+)?(\w*)\s*(?::\s*[\w: ]+)?\{([^{}]*)\}")


@dataclass(frozen=True)
class Family:
    """An op enum naming family: `GGML_OP_` (separator `_`) or `OpType::`."""

    prefix: str
    category: str  # UNARY for GGML_UNARY_OP_, so `GGML_OP_UNARY` can be refined by its sub-op list
    members: frozenset[str]
    enum: str | None = None  # the enum that defines the members, when its definition was found


@dataclass
class Inventory:
    name: str
    root: str
    files: int = 0
    lines: int = 0
    skipped: list[str] = field(default_factory=list)
    ops: dict[str, Evidence] = field(default_factory=dict)
    rejected: dict[str, Evidence] = field(default_factory=dict)
    supports_by_default: Evidence | None = None
    fusions: dict[str, Evidence] = field(default_factory=dict)
    isa: dict[str, tuple[int, Evidence]] = field(default_factory=dict)  # family -> (hits, first use)
    kernels: list[str] = field(default_factory=list)
    fusion_helpers: list[str] = field(default_factory=list)  # the fusion checks its code calls
    built_from: list[str] = field(default_factory=list)  # backends whose sources its build compiles



def detect_families(scans: list[Scan], headers: list[str]) -> list[Family]:
    """Op enum families: name prefixes whose last segment names an op (`GGML_OP_`, `OP_`, `OpType::`),
    seen in the backends' case labels or in enum definitions (shared headers, backend code).

    When the family's enum definition is found (the largest enum whose members carry the prefix), its
    members are the ops: `GGML_OP_POOL_AVG` shares the prefix of `enum ggml_op` but belongs to
    `enum ggml_op_pool`, so it is no op. Without one, the case labels seen are the members."""
    from_cases: dict[str, set[str]] = {}
    for scan in scans:
        for _, label in scan.cases:
            prefix = _op_prefix(label)
            if prefix:
                from_cases.setdefault(prefix, set()).add(label[len(prefix):])
    enums: dict[str, list[tuple[str, list[str]]]] = {}  # prefix -> [(enum name, members)]
    for code in [*headers, *(s.code for s in scans)]:
        if "enum" not in code:
            continue
        for m in _ENUM.finditer(code):
            name = m.group(2)
            members = [w.group() for item in m.group(3).split(",") if (w := _WORD.search(item))]
            if m.group(1) and _op_prefix(name + "::x"):  # a scoped enum: members are named Scope::Member
                members = [f"{name}::{mem}" for mem in members]
            prefixes = {p for mem in members if (p := _op_prefix(mem))}
            for prefix in prefixes:
                enums.setdefault(prefix, []).append((name, members))
    families = []
    for prefix in sorted(set(from_cases) | set(enums)):
        candidates = [(n, ms) for n, ms in enums.get(prefix, []) if sum(m.startswith(prefix) for m in ms) >= 3]
        if candidates:
            name, members = max(candidates, key=lambda c: len(c[1]))
            shorts = {m[len(prefix):] for m in members if m.startswith(prefix)}
            enum: str | None = name or "(anonymous enum)"
        else:
            shorts, enum = from_cases.get(prefix, set()), None
        shorts -= _NOT_OPS
        used = prefix in from_cases or any(prefix in s.code for s in scans)
        if len(shorts) >= 3 and used:
            families.append(Family(prefix, _category(prefix), frozenset(shorts), enum))
    return sorted(families, key=lambda f: (-len(f.members), f.prefix))


def _op_prefix(label: str) -> str | None:
    if "::" in label:
        m = _SCOPED_OP.match(label)
        return m.group(1) + "::" if m else None
    parts = label.split("_")
    for i, part in enumerate(parts[:-1]):
        if part in _OP_SEGMENTS:
            return "_".join(parts[: i + 1]) + "_"
    return None


def _category(prefix: str) -> str:
    parts = [p for p in re.split(r"_|::", prefix) if p]
    return parts[-2].upper() if len(parts) >= 2 and parts[-1].upper() in _OP_SEGMENTS else ""


def fusion_helpers(scans: list[Scan], families: list[Family]) -> dict[str, int]:
    """The functions that decide whether a chain of ops fuses, by name -> the index of their op-list parameter.

    A fusion helper takes a list of ops of an op enum (`std::initializer_list<enum ggml_op> ops`, `const
    enum ggml_op * ops`, `std::vector<ggml_op>`) and either says so in its name (`ggml_vk_can_fuse`,
    `ggml_cuda_can_fuse`, Metal's `can_fuse`) or hands that list on to a fusion helper (a backend's own
    check built on `ggml_can_fuse`). Read from the definitions of every backend and the shared headers, so
    each backend's own helper is known by what it is, whatever it is called."""
    enums = {f.enum for f in families if f.enum}
    if not enums:
        return {}
    list_type = re.compile(r"(?:initializer_list|vector|span|array)\s*<\s*(?:const\s+)?(?:enum\s+)?(" + "|".join(
        map(re.escape, sorted(enums))) + r")\b|(?:enum\s+)?\b(" + "|".join(map(re.escape, sorted(enums))) +
        r")\s*(?:const\s*)?(?:\*|\w+\s*\[)")
    candidates: dict[str, tuple[int, str, str]] = {}  # name -> (index, parameter name, body)
    for scan in scans:
        code = scan.code
        if not any(e in code for e in enums):
            continue
        for offset, name in scan.funcs:
            open_at = code.find("(", offset)
            close_at = matching(code, open_at)
            if close_at < 0 or not list_type.search(code, open_at, close_at):
                continue
            params = split_top(code[open_at + 1: close_at])
            for index, param in enumerate(params):
                if list_type.search(param) and (words := _WORD.findall(param)):
                    body_at = code.find("{", close_at)
                    body_end = matching(code, body_at, "{", "}")
                    candidates.setdefault(name, (index, words[-1], code[body_at: body_end if body_end > 0 else None]))
                    break
    helpers = {name: index for name, (index, _, _) in candidates.items() if "fus" in name.lower()}
    changed = True
    while changed:  # a function that passes its op list on to a helper is one too
        changed = False
        for name, (index, param, body) in candidates.items():
            if name in helpers:
                continue
            for helper in helpers:
                for m in re.finditer(r"\b" + re.escape(helper) + r"\s*\(", body):
                    if re.search(r"\b" + re.escape(param) + r"\b", body[m.end(): matching(body, m.end() - 1)]):
                        helpers[name] = index
                        changed = True
                        break
                if name in helpers:
                    break
    return helpers



def _chain_key(names: list[str]) -> str:
    """`A+B+C`; a run of one op (`ADD, ADD, ADD`: consecutive adds in one kernel) is `ADD+ADD` whatever its
    length, so backends that fuse up to 4 or up to 8 of them have the same fusion."""
    return "+".join(names[:2] if len(set(names)) == 1 else names)



def _graph_offset(node: str) -> int:
    """Where a tested node lies from the current one, read from its index: `nodes[i - 1]` -1, `nodes[i + 2]` 2,
    any other 0 (the order written is kept)."""
    m = re.search(r"\[\w+([+-]\d+)\]$", node)
    return int(m.group(1)) if m else 0






class Extractor:
    """Extraction rules shared by every backend of one comparison (same families, same op names)."""

    def __init__(self, families: list[Family], helpers: dict[str, int] | None = None) -> None:
        self.families = families
        self.helpers = helpers or {}
        self._helper_calls = {name: re.compile(r"\b" + re.escape(name) + r"\s*\(") for name in self.helpers}
        self._fuse_named = {name for name in self.helpers if "fus" in name.lower()}
        by_len = sorted(families, key=lambda f: -len(f.prefix))
        # no leading \b: a literal start lets the regex engine skip ahead fast; the boundary is checked after
        self._token = re.compile(
            "(?:" + "|".join(re.escape(f.prefix) for f in by_len) + r")\w+" if families else r"(?!)"
        )
        self._categories = {f.category for f in families if f.category}
        shorts = {m for f in families for m in f.members}
        self._shorts = sorted(shorts, key=len, reverse=True)
        self._upper_shorts: dict[str, str] = {}
        for s in self._shorts:
            self._upper_shorts.setdefault(s.upper(), s)
        # families of sub-ops (GGML_UNARY_OP_, GGML_GLU_OP_): their category is an op of another family
        # (GGML_OP_UNARY); a graph node is never one of them, so a list of them alone is no chain
        self._sub_families = {f.prefix for f in families if f.category and any(
            f.category in g.members for g in families if g is not f)}
        named = [re.escape(s.lower()) for s in self._shorts if len(s) > 3]
        self._op_named = re.compile("|".join(["forward", "kernel", *named]))

    def is_op(self, token: str) -> bool:
        fam = self._family(token)
        if fam is None:
            return False
        short = token[len(fam.prefix):]
        return short in fam.members if fam.enum else short not in _NOT_OPS

    def family_of(self, token: str) -> str | None:
        fam = self._family(token)
        return fam.prefix if fam else None

    def _family(self, token: str) -> Family | None:
        for f in self.families:
            if token.startswith(f.prefix) and len(token) > len(f.prefix):
                return f
        return None

    def short(self, token: str) -> str:
        fam = self._family(token)
        return token[len(fam.prefix):] if fam else token

    def inventory(self, root: BackendRoot, scans: list[Scan]) -> Inventory:
        inv = Inventory(root.name, root.root, files=len(scans), skipped=list(root.skipped))
        kernels: set[str] = set()
        called: set[str] = set()
        isa_hits: Counter[str] = Counter()
        for scan in scans:
            inv.lines += len(scan.line_starts)
            code = scan.code
            for m in self._token.finditer(code):
                tok = m.group()
                if tok not in inv.ops and self.is_op(tok) and not glued(code, m.start()):
                    inv.ops[tok] = scan.evidence(m.start())
            for fam, (hits, first) in scan.isa.items():
                isa_hits[fam] += hits
                if fam not in inv.isa:
                    inv.isa[fam] = (0, scan.evidence(first))
            kernels.update(self._kernels(scan))
            self._supports(scan, inv)
            self._fusions(scan, scans, inv)
            called.update(name for name in self._calls(code))
        inv.isa = {k: (isa_hits[k], ev) for k, (_, ev) in inv.isa.items()}
        for tok in inv.rejected:
            inv.ops.pop(tok, None)
        inv.kernels = sorted(kernels)
        inv.fusion_helpers = sorted(called)
        return inv

    def _kernels(self, scan: Scan) -> set[str]:
        path = scan.file.path
        if path.endswith(_SHADER_SUFFIXES):
            return {path.rsplit("/", 1)[-1].rsplit(".", 1)[0]}
        found = {m.group(1) for m in _GPU_KERNEL.finditer(scan.code)}
        if not found:
            # host-side kernels: functions named after an op or a compute step
            for _, name in scan.funcs:
                if self._op_named.search(name.lower()):
                    found.add(name)
        return found

    def _supports(self, scan: Scan, inv: Inventory) -> None:
        """Explicit rejections (`case X: return false;`) and a `default: return true` in supports-op."""
        for i, (start, name) in enumerate(scan.funcs):
            if not _SUPPORTS_FN.search(name):
                continue
            end = scan.funcs[i + 1][0] if i + 1 < len(scan.funcs) else len(scan.code)
            body = scan.code[start:end]
            for m in _REJECT.finditer(body):
                for label in CASE.findall(m.group(1)):
                    if self.is_op(label) and label not in inv.rejected:
                        inv.rejected[label] = scan.evidence(start + m.start())
            defaults = list(_DEFAULT.finditer(body))
            if defaults and defaults[-1].group(1) == "true" and inv.supports_by_default is None:
                inv.supports_by_default = scan.evidence(start + defaults[-1].start())

    # --- fusions -------------------------------------------------------------------------------

    def _fusions(self, scan: Scan, scans: list[Scan], inv: Inventory) -> None:
        code = scan.code
        file_says_fusion = "fus" in scan.file.path.rsplit("/", 1)[-1].lower()
        for m in _LIST.finditer(code):
            items = [s.strip() for s in m.group(1).split(",")]
            if sum(self.is_op(t) for t in items) < 2 and not (len(items) >= 2 and self.is_op(items[-1])):
                continue
            before = code[max(0, m.start() - 400): m.start()]
            stmt = _STMT_START.search(before)
            head = stmt.group()[1:] if stmt else before
            if _RANGE_FOR.search(head):
                continue
            if not (file_says_fusion or "fus" in head.lower() or self._in_fusion_function(scan, m.start())
                    or callee_around(code, m.start()) in self.helpers):
                named = _LIST_NAME.search(head) or _RECEIVER.search(head)
                if not (named and self._used_in_fusion(named.group(1), scan, scans, m.end(), head)):
                    continue
            sub = _SUBLIST.match(code, m.end())
            for seq in self._sequences(items, sub.group(1).split(",") if sub else [], scan, scans, m.start()):
                inv.fusions.setdefault(_chain_key(seq), scan.evidence(m.start()))
        self._element_arrays(scan, scans, inv)
        if "fill" in code:
            for m in _FILL.finditer(code):
                if not glued(code, m.start()):
                    self._filled(m.group(1), m.group(2), scan, scans, inv, m.start(), m.end())
        if "fus" in code or "Fus" in code or "FUS" in code:
            self._tested_chains(scan, scans, inv)
            for m in _FUSION_STRING.finditer(scan.file.text):
                line = scan.file.text.count("\n", 0, m.start()) + 1
                if not self._line_has_code(scan, line, m.group().split('"')[0].rstrip(" =(")):
                    continue
                chain = self._split_name(m.group(1))
                key = _chain_key(chain) if chain else m.group(1)
                inv.fusions.setdefault(key, Evidence(scan.file, line))

    def _element_arrays(self, scan: Scan, scans: list[Scan], inv: Inventory) -> None:
        """Runs of `ops[0] = A; ops[1] = B; ...` on one array, and a loop's `ops[i] = A;`, used by a fusion check
        nearby."""
        code = scan.code
        run: list[tuple[str, int, str, int, int]] = []  # (array, index, value, start, end)

        def flush() -> None:
            if len(run) >= 2 or (len(run) == 1 and run[0][1] != 0):
                by_index = {index: value for _, index, value, _, _ in run}
                items = [by_index.get(i, "") for i in range(max(by_index) + 1)]
                start, end = run[0][3], run[-1][4]
                if self._used_nearby(run[0][0], code[end: end + 3000]) or self._in_fusion_function(scan, start):
                    for seq in self._sequences(items, [], scan, scans, start):
                        inv.fusions.setdefault(_chain_key(seq), scan.evidence(start))
            run.clear()

        for m in _ELEM.finditer(code):
            index = m.group(1)
            if not index.isdigit() and not (self.is_op(m.group(2)) or m.group(2).endswith("->op")):
                continue
            name = _ELEM_NAME.search(code, max(0, m.start() - 80), m.start())
            if name is None:
                continue
            if not index.isdigit():
                self._filled(name.group(1), m.group(2), scan, scans, inv, name.start(), m.end())
                continue
            item = (name.group(1), int(index), m.group(2), name.start(), m.end())
            if run and (item[0] != run[-1][0] or code[run[-1][4]: item[3]].strip()):
                flush()
            run.append(item)
        flush()

    def _sequences(self, items: list[str], sub_ops: list[str], scan: Scan, scans: list[Scan],
                   offset: int) -> list[list[str]]:
        """Op short names of a fusion. The first op may come from the dispatch around the code or calling its
        function (`fops[0] = op->op`): every label of that `case` group starts a chain of its own
        (`case NORM: case RMS_NORM:` fuses NORM+MUL and RMS_NORM+MUL)."""
        if not items or not all(self.is_op(t) for t in items[1:]):
            return []
        firsts = [items[0]] if self.is_op(items[0]) else (
            self._held_ops(scan, items[0], offset) or self._dispatch_ops(scan, scans, offset))
        out = []
        for first in firsts:
            seq = [first, *items[1:]]
            if all(self.family_of(tok) in self._sub_families for tok in seq):
                continue  # sub-ops alone (SWIGLU, GEGLU): alternatives of one node, not a chain of nodes
            subs = [s.strip() for s in sub_ops if self.is_op(s.strip())]
            names = []
            for tok in seq:
                short = self.short(tok)
                if short in self._categories and subs:
                    short = self.short(subs.pop(0))
                names.append(short)
            if len(names) >= 2:
                out.append(names)
        return out

    def _filled(self, name: str, value: str, scan: Scan, scans: list[Scan], inv: Inventory, start: int,
                end: int) -> None:
        """An array filled with one op (`std::fill(ops, ops + 8, ADD)`, a loop's `adds[i] = ADD`) and handed to a
        fusion check: consecutive nodes of that op fuse (CUDA's and Vulkan's chains of adds). The op may be the
        node's own (`std::fill(ops, ops + 8, node->op)` under `if (node->op == ADD || node->op == MUL)`)."""
        if not (self._used_nearby(name, scan.code[end: end + 3000]) or self._in_fusion_function(scan, start)):
            return
        ops = [value] if self.is_op(value) else self._guard(scan.code, start).get(value.removesuffix("->op"), [])
        for op in ops:
            for seq in self._sequences([op, op], [], scan, scans, start):
                inv.fusions.setdefault(_chain_key(seq), scan.evidence(start))

    def _held_ops(self, scan: Scan, name: str, offset: int) -> list[str]:
        """The ops a variable may hold where `offset` uses it, from its last assignment before in the same
        function: one op, or ops chosen by a flag (`gating_op = sigmoid ? UNARY : SOFT_MAX`)."""
        if not _WORD.fullmatch(name):
            return []
        fn = scan.function_at(offset)
        assignments = list(re.compile(r"\b" + re.escape(name) + _ASSIGNED).finditer(scan.code, fn[0] if fn else 0,
                                                                                  offset))
        if not assignments:
            return []
        value = assignments[-1].group(1)
        choices = [c.strip().strip("()").strip() for c in _ALTERNATIVES.split(value.split("?", 1)[-1])]
        return choices if all(self.is_op(c) for c in choices) else []

    def _tested_chains(self, scan: Scan, scans: list[Scan], inv: Inventory) -> None:
        """Fusions written as op tests: a condition that speaks of fusing and tests the op of another node than the
        one its block is guarded by (`if (node->op == ADD) { if (nodes[next]->op == RMS_NORM && ... add_rms_fusion)`
        is ADD+RMS_NORM), or of several nodes (`a->op == RMS_NORM && b->op == MUL && fuse`). A condition that calls
        a fusion helper is left to its op list."""
        code = scan.code
        seen: set[int] = set()
        for m in _OP_TEST.finditer(code):
            if not self._is_op_test(code, m):
                continue
            start, end = statement(code, m.start())
            if start in seen:
                continue
            seen.add(start)
            condition = code[start:end]
            if "fus" not in condition.lower() or self._calls(condition):
                continue
            nodes = self._guard(code, start)
            if not nodes:
                cases = self._cases_before(scan, start)
                nodes = {"": cases} if cases else {}
            for node, ops in self._op_tests(code, start, end).items():
                nodes.setdefault(node, ops)  # the guarded node tested again is the same node
            if len(nodes) < 2:
                continue
            in_order = [nodes[node] for node in sorted(nodes, key=_graph_offset)]
            for chain in itertools.islice(itertools.product(*in_order), 16):
                for seq in self._sequences(list(chain), [], scan, scans, m.start()):
                    inv.fusions.setdefault(_chain_key(seq), scan.evidence(m.start()))

    def _op_tests(self, code: str, start: int, end: int) -> dict[str, list[str]]:
        """The `X->op == A` tests between start and end: tested node (as written) -> the ops it is tested for."""
        tests: dict[str, list[str]] = {}
        for m in _OP_TEST.finditer(code, start, end):
            if self._is_op_test(code, m):
                node = _SUBJECT.search(code, max(start, m.start() - 200), m.start())
                key = re.sub(r"\s+", "", node.group()).rstrip(".->") if node else ""
                if m.group(1) not in tests.setdefault(key, []):
                    tests[key].append(m.group(1))
        return tests

    def _is_op_test(self, code: str, m: re.Match[str]) -> bool:
        """Whether an `_OP_TEST` match tests a node's op (`->op`, `.op()`) against an op of a family."""
        before = code[max(0, m.start() - 2): m.start()]
        return (before == "->" or before.endswith(".")) and self.is_op(m.group(1))

    def _guard(self, code: str, offset: int) -> dict[str, list[str]]:
        """The op tests of the `if`/`while` whose block holds `offset`, looking up to three blocks out through
        control statements (never out of a function or a `switch`)."""
        at = offset
        for _ in range(3):
            opening = opener(code, at)
            j = opening - 1
            while j >= 0 and code[j].isspace():
                j -= 1
            if opening < 0 or j < 0:
                return {}
            if code[j] == ")":
                paren = opener(code, j, "(", ")", limit=2000)
                if paren < 0 or not _CONTROL.search(code[max(0, paren - 12): paren]):
                    return {}  # a function's body, a switch, a lambda
                tests = self._op_tests(code, paren, j)
                if tests:
                    return tests
            elif not _CONTROL.search(code[max(0, j - 11): j + 1]):
                return {}
            at = opening
        return {}

    def _dispatch_ops(self, scan: Scan, scans: list[Scan], offset: int) -> list[str]:
        """The ops of the `case` group the code sits in, or of the `case` group whose body calls its function."""
        fn = scan.function_at(offset)
        fn_start = fn[0] if fn else 0
        for k in range(len(scan.cases) - 1, -1, -1):
            pos, label = scan.cases[k]
            if fn_start <= pos < offset and self.is_op(label):
                return self._case_group(scan, k)
            if pos < fn_start:
                break
        if fn is None:
            return []
        call = re.compile(r"\b" + re.escape(fn[1]) + r"\s*\(")
        for other in scans:
            if fn[1] not in other.code:
                continue
            for m in call.finditer(other.code):
                if other is scan and m.start() == fn[0]:
                    continue
                found = self._cases_before(other, m.start())
                if found:
                    return found
        return []

    def _cases_before(self, scan: Scan, offset: int) -> list[str]:
        fn = scan.function_at(offset)
        fn_start = fn[0] if fn else 0
        for k in range(len(scan.cases) - 1, -1, -1):
            pos, label = scan.cases[k]
            if pos < max(fn_start, offset - 1500):
                return []
            if pos < offset and self.is_op(label):
                return self._case_group(scan, k)
        return []

    def _case_group(self, scan: Scan, k: int) -> list[str]:
        """The op labels of the `case` at index k and of those next to it with no code between
        (`case A: case B: {`), in source order."""
        def adjacent(i: int) -> bool:  # case i is followed by case i + 1 directly
            between = scan.code[scan.cases[i][0]: scan.cases[i + 1][0]]
            return _CASE_ONLY.fullmatch(between) is not None
        lo, hi = k, k
        while lo > 0 and adjacent(lo - 1):
            lo -= 1
        while hi + 1 < len(scan.cases) and adjacent(hi):
            hi += 1
        return [label for _, label in scan.cases[lo: hi + 1] if self.is_op(label)]

    def _in_fusion_function(self, scan: Scan, offset: int) -> bool:
        fn = scan.function_at(offset)
        return fn is not None and "fus" in fn[1].lower()

    def _calls(self, code: str) -> list[str]:
        """The fusion helpers `code` calls (most are named for fusing: one look for "fus" rules them out)."""
        says_fuse = "fus" in code or "Fus" in code or "FUS" in code
        return [name for name, call in self._helper_calls.items()
                if (says_fuse or name not in self._fuse_named) and name in code
                and any(not glued(code, m.start()) for m in call.finditer(code))]

    def _used_nearby(self, name: str, window: str) -> bool:
        """Whether a statement of `window` that speaks of fusing (or calls a fusion helper) uses `name`."""
        if name not in window:
            return False
        word = re.compile(r"\b" + re.escape(name) + r"\b")
        return any(name in stmt and word.search(stmt) and ("fus" in stmt.lower() or self._calls(stmt))
                   for stmt in re.split(r"[;{}]", window))

    def _used_in_fusion(self, name: str, scan: Scan, scans: list[Scan], end: int, head: str) -> bool:
        """A named op list counts when a fusion check uses it: nearby for a local, anywhere for a global."""
        if self._used_nearby(name, scan.code[end: end + 4000]):
            return True
        is_global = scan.function_at(end) is None or re.search(r"\b(static|constexpr|#\s*define)\b", head)
        return bool(is_global) and any(
            name in other.code and self._used_nearby(name, other.code) for other in scans
        )

    def _split_name(self, name: str) -> list[str] | None:
        """`RMS_NORM_MUL_ADD` -> [RMS_NORM, MUL, ADD] using the known op names: the split into the most ops,
        so a fused op of a backend's private enum (`HTP_OP_RMS_NORM_MUL`) does not swallow the chain it
        names (`RMS_NORM_MUL_ROPE` is RMS_NORM+MUL+ROPE, not RMS_NORM_MUL+ROPE)."""
        words = name.upper().split("_")
        n = len(words)
        best: list[list[str] | None] = [None] * n + [[]]  # best[i]: the finest split of words[i:]
        for i in range(n - 1, -1, -1):
            for j in range(n, i, -1):  # longest first: it wins a tie
                rest = best[j]
                op = self._upper_shorts.get("_".join(words[i:j])) if rest is not None else None
                if op is not None and rest is not None:
                    current = best[i]
                    if current is None or len(rest) + 1 > len(current):
                        best[i] = [op, *rest]
        out = best[0]
        return out if out is not None and len(out) >= 2 else None

    @staticmethod
    def _line_has_code(scan: Scan, line: int, ident: str) -> bool:
        start = scan.line_starts[line - 1] if line - 1 < len(scan.line_starts) else len(scan.code)
        end = scan.line_starts[line] if line < len(scan.line_starts) else len(scan.code)
        words = _WORD.findall(ident)
        return bool(words) and words[-1] in scan.code[start:end]
