"""One source file read as code: comments and strings blanked, then lines, cases, functions and ISA uses indexed."""

from __future__ import annotations

import bisect
import itertools
import re
from dataclasses import dataclass

from autoresearch_mcp.analysis.backends import SourceFile

_STRIP = re.compile(
    r'R"(?P<d>[^()\\\s"]{0,16})\(.*?\)(?P=d)"'  # C++ raw string
    r"|/\*.*?\*/"
    r"|//[^\n]*"
    r'|"(?:\\.|[^"\\\n])*"'
    r"|'(?:\\.|[^'\\\n])*'"
    r"|\\\n",  # line continuation: keep the newline, drop the backslash
    re.DOTALL,
)
CASE = re.compile(r"case\s+([A-Za-z_]\w*(?:::\w+)*)\s*:(?!:)")
# a function definition starts a line: return type words, then the name and an open parenthesis
_FUNC = re.compile(
    r"^[ \t]*(?:template\s*<[^>{};]*>\s*)?(?:[A-Za-z_][\w:<>,*&]*[ \t*&]+){1,6}([A-Za-z_]\w*)\s*\(",
    re.MULTILINE,
)
_NOT_FUNC_NAMES = frozenset({"if", "for", "while", "switch", "return", "sizeof", "else", "do", "case",
                             "defined", "decltype", "static_assert", "new", "delete", "catch", "goto",
                             "throw", "co_return", "using", "typedef"})
_DEF_TAIL = re.compile(r"\)\s*(?:const|override|final|noexcept|volatile|->\s*[\w:<>*&\s]+?|\s)*\{\Z")

# SIMD / ISA families and GPU matrix features, by intrinsic, type or feature macro. Each regex
# starts with a literal shared by all its branches, so the engine skips ahead fast (an alternation
# of different first letters is ten times slower); a match glued to a longer identifier
# (`ggml_vk_mm_...` is not the SSE prefix `_mm_`) is dropped.
ISA_PATTERNS: dict[str, tuple[str, ...]] = {
    "AVX-512": (r"_mm512_\w+", r"__m512\w*|__AVX512\w*"),
    "AVX2": (r"_mm256_\w+", r"__m256\w*|__AVX2__"),
    "AVX-VNNI": (r"__AVXVNNI__|_mm(?:256|512)_dpbusd\w*",),
    "F16C/FMA": (r"__F16C__|__FMA__", r"_mm(?:256|512)?_(?:cvtph_ps|fmadd_ps)"),
    "SSE": (r"_mm_\w+", r"__m128\w*|__SSE\w*"),
    "AMX": (r"__AMX_\w+", r"_tile_(?:loadd|stored|dp\w+|zero|release|loadconfig)\w*"),
    "NEON": (r"__ARM_NEON\w*", r"float(?:16|32|64)x\d+(?:x[234])?_t\b", r"int(?:8|16|32|64)x\d+(?:x[234])?_t\b",
             r"uint(?:8|16|32|64)x\d+(?:x[234])?_t\b"),
    "ARM dotprod/i8mm": (r"__ARM_FEATURE_(?:DOTPROD|MATMUL_INT8)", r"vdotq_\w+", r"vmmlaq_\w+"),
    "SVE": (r"__ARM_FEATURE_SVE\w*", r"sv(?:ld1|st1|dup|add|mul|mla|dot|whilelt|ptrue|cnt|float|int|uint)\w*"),
    "SME": (r"__ARM_FEATURE_SME\w*",),
    "RVV": (r"__riscv_v\w*", r"vfloat\d+mf?\d+_t\b", r"vint\d+mf?\d+_t\b", r"vuint\d+mf?\d+_t\b"),
    "POWER VSX": (r"__(?:POWER\d+_VECTOR|VSX)__", r"vec_xl\b"),
    "WASM SIMD": (r"__wasm_simd128__", r"wasm_[fiu]\d+x\d+_\w+", r"v128_t\b"),
    "LoongArch LSX/LASX": (r"__loongarch_a?sx|__lasx_\w+|__lsx_\w+",),
    "s390x VXE": (r"__VXE2?__",),
    "tensor-core MMA": (r"wmma::\w+", r"mma\.sync\w*", r"__builtin_amdgcn_mfma\w*"),
    "Metal simdgroup matrix": (r"simdgroup_(?:(?:float|half|bfloat)\d*x\d+|multiply_accumulate)",),
    "cooperative matrix": (r"GL_(?:KHR_cooperative_matrix|NV_cooperative_matrix2)", r"coopmat\w*"),
    "subgroups": (r"GL_KHR_shader_subgroup\w*", r"subgroup(?:Add|Max|Min|Shuffle|Broadcast|Ballot)\w*",
                  r"sub_group_\w+"),
}
_ISA = [(name, [re.compile(p) for p in patterns]) for name, patterns in ISA_PATTERNS.items()]


@dataclass(frozen=True)
class Evidence:
    """A place in a source file; the snippet is read only for the evidence that is shown."""

    source: SourceFile
    line: int

    @property
    def file(self) -> str:
        return self.source.path

    @property
    def snippet(self) -> str:
        return self.source.snippet(self.line)


@dataclass
class Scan:
    """One file, comments and strings blanked, with what the later passes need from it."""

    file: SourceFile
    code: str
    line_starts: list[int]
    cases: list[tuple[int, str]]  # (offset, label)
    funcs: list[tuple[int, str]]  # (offset, name), sorted
    isa: dict[str, tuple[int, int]]  # family -> (hits, offset of the first)

    def line_of(self, offset: int) -> int:
        return bisect.bisect_right(self.line_starts, offset)

    def evidence(self, offset: int) -> Evidence:
        line = self.line_of(offset)
        return Evidence(self.file, line)

    def function_at(self, offset: int) -> tuple[int, str] | None:
        i = bisect.bisect_right(self.funcs, (offset, "\uffff"))
        return self.funcs[i - 1] if i else None


def _blank(m: re.Match[str]) -> str:
    s = m.group()
    if s.startswith(("\"", "'", "R")):
        return '""' + "\n" * s.count("\n")
    return "\n" * s.count("\n") or " "


def strip_code(text: str) -> str:
    """Comments and string literals blanked; every newline kept, so line numbers stay right."""
    return _STRIP.sub(_blank, text)


def scan_file(f: SourceFile) -> Scan:
    return Scan(f, *index_text(f.text))


Index = tuple[str, list[int], list[tuple[int, str]], list[tuple[int, str]], dict[str, tuple[int, int]]]


def index_text(text: str) -> Index:
    """Blank comments and strings, then index lines, case labels, function definitions and ISA uses.

    Independent of the other files, so it runs in worker processes on big trees."""
    code = strip_code(text)
    line_starts = [0, *itertools.accumulate(len(line) + 1 for line in code.split("\n"))][:-1]
    cases = [(m.start(), m.group(1)) for m in CASE.finditer(code) if not glued(code, m.start())]
    funcs = []
    for m in _FUNC.finditer(code):
        name = m.group(1)
        if name in _NOT_FUNC_NAMES or m.group().split(None, 1)[0] in _NOT_FUNC_NAMES:
            continue
        # a definition: the parameter list closes, then the body opens before any `;`
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace >= 0 and (semi < 0 or brace < semi) and _DEF_TAIL.search(code, m.end(), brace + 1):
            funcs.append((m.start(1), name))
    isa: dict[str, tuple[int, int]] = {}
    for fam, regexes in _ISA:
        hits = [m.start() for rx in regexes for m in rx.finditer(code) if not glued(code, m.start())]
        if hits:
            isa[fam] = (len(hits), min(hits))
    return code, line_starts, cases, funcs, isa


def glued(code: str, offset: int) -> bool:
    """The match continues an identifier (`ggml_vk_mm_` is not the SSE prefix `_mm_`)."""
    return offset > 0 and (code[offset - 1].isalnum() or code[offset - 1] in "_.")
