"""Build-time rewrites of a CUDA source for g++, keeping its line numbers.

``extern __shared__ T name[];`` becomes a pointer to the launch's dynamic shared buffer, and recognised
inline PTX ``asm(...)`` statements become calls of host functions; any other PTX instruction is a build
error naming it. :func:`rewrite_source` is the entry point (see the package docstring).
"""

from __future__ import annotations

import re

from .errors import HostCudaBuildError


# -- source rewriting ----------------------------------------------------------------------------------
def _mask(code: str) -> str:
    """``code`` with comments and the insides of string/char literals blanked (same length, newlines kept)."""
    out = list(code)
    i, n = 0, len(code)

    def blank(a: int, b: int) -> None:
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = code[i]
        if code.startswith("//", i):
            j = code.find("\n", i)
            j = n if j < 0 else j
            while j > 0 and code[j - 1] == "\\" and j < n:  # a line comment continued by backslash
                k = code.find("\n", j + 1)
                j = n if k < 0 else k
            blank(i, j)
            i = j
        elif code.startswith("/*", i):
            j = code.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and code.startswith('R"', i) and (i == 0 or not (code[i - 1].isalnum() or code[i - 1] == "_")):
            m = re.match(r'R"([^()\\\s]{0,16})\(', code[i:])
            if not m:
                i += 1
                continue
            end = code.find(")" + m.group(1) + '"', i + m.end())
            end = n if end < 0 else end + len(m.group(1)) + 2
            blank(i + 2, end - 1)
            i = end
        elif c in "\"'":
            prefix = re.search(r"(?:\bu8|\b[uUL])$", code[max(0, i - 3):i])
            if c == "'" and i > 0 and code[i - 1].isalnum() and not prefix:
                i += 1  # a digit separator (1'000'000)
                continue
            j = i + 1
            while j < n and code[j] != c and code[j] != "\n":
                j += 2 if code[j] == "\\" else 1
            blank(i + 1, min(j, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def _line_of(code: str, pos: int) -> int:
    return code.count("\n", 0, pos) + 1


def _matching(masked: str, open_pos: int) -> int:
    """Index of the parenthesis closing the one at ``open_pos`` (in masked text)."""
    depth = 0
    for k in range(open_pos, len(masked)):
        ch = masked[k]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return k
    return -1


def _split_top(text: str, masked: str, sep: str) -> list[str]:
    """Split ``text`` at ``sep`` characters that are outside brackets (judged on ``masked``)."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(masked):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    return parts


_ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"', "'": "'", "r": "", "0": "\0"}


def _string_literals(text: str) -> str:
    body = "".join(m.group(1) for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', text, re.S))
    return re.sub(r"\\(.)", lambda m: _ESCAPES.get(m.group(1), m.group(1)), body, flags=re.S)


_SPECIAL_REGS = {
    "%laneid": "::hostcuda::lane_id()", "%warpid": "::hostcuda::warp_id()",
    "%clock": "(unsigned)::hostcuda::clock_ticks()", "%clock64": "::hostcuda::clock_ticks()",
    **{f"%tid.{a}": f"threadIdx.{a}" for a in "xyz"}, **{f"%ntid.{a}": f"blockDim.{a}" for a in "xyz"},
    **{f"%ctaid.{a}": f"blockIdx.{a}" for a in "xyz"}, **{f"%nctaid.{a}": f"gridDim.{a}" for a in "xyz"},
}
_FLOAT_OPS = {"add": 2, "sub": 2, "mul": 2, "div": 2, "fma": 3, "sqrt": 1, "neg": 1, "abs": 1, "min": 2, "max": 2}
_NEEDS_RN = {"div", "fma", "sqrt"}  # div.f32 alone would be div.approx/full: only .rn is exact IEEE
_MOV_TYPES = {"b16", "u16", "s16", "b32", "u32", "s32", "f32", "b64", "u64", "s64", "f64"}
_SUPPORTED_PTX = ("add|sub|mul|div|fma|sqrt|neg|abs|min|max[.rn][.ftz].f32|.f64 (div/fma/sqrt need .rn), "
                 "mov.b16|b32|b64|u32|s32|f32|u64|s64|f64, special registers "
                 + " ".join(sorted(_SPECIAL_REGS)))


def _ptx_statement(instr: str, operands: list[str], n_out: int, where: str) -> str:
    """One PTX instruction as a C++ statement on the asm operand expressions."""
    m = re.match(r"^([a-z][\w.]*)\s*(.*)$", instr, re.S)
    if not m or instr.startswith("@"):
        raise HostCudaBuildError(f"{where}: unsupported PTX instruction {instr!r} for the host build "
                                 f"(supported: {_SUPPORTED_PTX})")
    opcode, rest = m.group(1), m.group(2)
    tokens = [t.strip() for t in rest.split(",")] if rest.strip() else []

    def operand(tok: str) -> str:
        if re.fullmatch(r"%\d+", tok):
            k = int(tok[1:])
            if k >= len(operands):
                raise HostCudaBuildError(f"{where}: PTX operand {tok} out of range in {instr!r}")
            return operands[k]
        if tok in _SPECIAL_REGS:
            return _SPECIAL_REGS[tok]
        if re.fullmatch(r"0[fF][0-9a-fA-F]{8}", tok):
            return f"::hostcuda::ptx::f32_bits(0x{tok[2:]}u)"
        if re.fullmatch(r"0[dD][0-9a-fA-F]{16}", tok):
            return f"::hostcuda::ptx::f64_bits(0x{tok[2:]}ull)"
        if re.fullmatch(r"-?(?:0[xX][0-9a-fA-F]+|\d+)[uU]?", tok):
            return tok
        raise HostCudaBuildError(f"{where}: unsupported PTX operand {tok!r} in {instr!r}")

    def destination(tok: str) -> str:
        if not re.fullmatch(r"%\d+", tok) or int(tok[1:]) >= n_out:
            raise HostCudaBuildError(f"{where}: the destination of {instr!r} must be an output operand")
        return operand(tok)

    parts = opcode.split(".")
    base, mods = parts[0], parts[1:]
    if base == "mov" and len(mods) == 1 and mods[0] in _MOV_TYPES and len(tokens) == 2:
        return f"::hostcuda::ptx::mov({destination(tokens[0])}, {operand(tokens[1])});"
    if base in _FLOAT_OPS and mods and mods[-1] in ("f32", "f64"):
        kind, flags = mods[-1], mods[:-1]
        rounding = [f for f in flags if f in ("rn", "rz", "rm", "rp")]
        ftz = "ftz" in flags
        other = [f for f in flags if f not in ("rn", "ftz")]
        ok = (not other and (rounding == ["rn"] or (not rounding and base not in _NEEDS_RN))
              and not (ftz and kind == "f64") and not (rounding and base in ("neg", "abs", "min", "max"))
              and len(tokens) == _FLOAT_OPS[base] + 1)
        if ok:
            args = [operand(t) for t in tokens[1:]]
            if kind == "f32":
                args.append("true" if ftz else "false")
            return f"{destination(tokens[0])} = ::hostcuda::ptx::{base}_{kind}({', '.join(args)});"
    raise HostCudaBuildError(f"{where}: unsupported PTX instruction {instr!r} for the host build "
                             f"(supported: {_SUPPORTED_PTX})")


def _rewrite_asm(code: str, masked: str, filename: str) -> str:
    pattern = re.compile(r"(?<![\w$])(?:asm|__asm__|__asm)\b(?:\s*(?:volatile|__volatile__|inline|goto)\b)*\s*\(")
    pieces, last = [], 0
    for m in pattern.finditer(masked):
        if m.start() < last:
            continue
        where = f"{filename}:{_line_of(code, m.start())}"
        open_pos = m.end() - 1
        close = _matching(masked, open_pos)
        semi = close + 1
        while semi < len(masked) and masked[semi] in " \t\r\n":
            semi += 1
        if close < 0 or semi >= len(masked) or masked[semi] != ";":
            raise HostCudaBuildError(f"{where}: cannot parse this asm statement for the host build")
        inner, inner_masked = code[open_pos + 1:close], masked[open_pos + 1:close]
        sections = _split_top(inner, inner_masked, ":")
        masked_sections = _split_top(inner_masked, inner_masked, ":")
        template = _string_literals(sections[0])
        outputs: list[str] = []
        names: dict[str, int] = {}
        n_out = 0
        for s, (section, msection) in enumerate(zip(sections[1:3], masked_sections[1:3])):
            if not section.strip():
                continue
            for op_text in _split_top(section, msection, ","):
                om = re.match(r'^\s*(?:\[\s*(\w+)\s*\])?\s*"([^"]*)"\s*\((.*)\)\s*$', op_text, re.S)
                if not om:
                    raise HostCudaBuildError(f"{where}: cannot parse asm operand {op_text.strip()!r}")
                if om.group(1):
                    names[om.group(1)] = len(outputs)
                outputs.append(f"({om.group(3).strip()})")
                n_out += s == 0
        template = re.sub(r"%\[(\w+)\]", lambda t, named=names: f"%{named.get(t.group(1), 10**6)}", template)
        template = template.replace("%%", "%")
        statements = []
        for instr in re.split(r"[;\n]", template):
            instr = instr.strip()
            if instr:
                statements.append(_ptx_statement(instr, outputs, n_out, where))
        span = code[m.start():semi + 1]
        newline = "\\\n" if "\\\n" in span else "\n"
        replacement = "{ " + " ".join(statements) + " }" + newline * span.count("\n")
        pieces += [code[last:m.start()], replacement]
        last = semi + 1
    pieces.append(code[last:])
    return "".join(pieces)


def _rewrite_extern_shared(code: str, masked: str, filename: str) -> str:
    pattern = re.compile(r"\bextern\s+__shared__\b([^;{}]*?)\[\s*\]\s*;")
    pieces, last = [], 0
    for m in pattern.finditer(masked):
        decl = code[m.start(1):m.end(1)]
        decl = re.sub(r"(?:__align__|alignas)\s*\([^)]*\)|__attribute__\s*\(\(.*?\)\)", " ", decl)
        dm = re.match(r"^\s*(.*?)\s*\b([A-Za-z_]\w*)\s*$", decl, re.S)
        if not dm or not dm.group(1).strip():
            raise HostCudaBuildError(f"{filename}:{_line_of(code, m.start())}: cannot parse this extern __shared__ "
                                     "declaration for the host build")
        type_, name = " ".join(dm.group(1).split()), dm.group(2)
        span = code[m.start():m.end()]
        # The lambda with a capture-default only compiles at function scope: a namespace-scope
        # `extern __shared__` is a build error instead of a pointer fixed at load time.
        replacement = (f"{type_} *const {name} = [&] {{ return reinterpret_cast<{type_} *>("
                       f"::hostcuda::dynamic_shared()); }}();" + "\n" * span.count("\n"))
        pieces += [code[last:m.start()], replacement]
        last = m.end()
    pieces.append(code[last:])
    return "".join(pieces)


def rewrite_source(code: str, filename: str = "<inline>") -> str:
    """The CUDA source as g++ compiles it: ``extern __shared__`` arrays and inline PTX rewritten.

    Line numbers are kept, so g++'s messages point at the original lines.

    Raises:
        HostCudaBuildError: an ``asm`` statement with PTX the host build does not implement, or a
            declaration the rewriter cannot parse.
    """
    code = _rewrite_asm(code, _mask(code), filename)
    return _rewrite_extern_shared(code, _mask(code), filename)


def _plain_kernels(code: str) -> list[str]:
    """Names of the non-template ``__global__`` functions of ``code`` (for name_expressions=None)."""
    masked = _mask(code)
    names: list[str] = []
    for m in re.finditer(r"\b__global__\b", masked):
        head = masked[:m.start()]
        cut = max(head.rfind(";"), head.rfind("}"), head.rfind("{"))
        if re.search(r"\btemplate\b", head[cut + 1:]):
            continue
        nm = re.match(r"\s*(?:__launch_bounds__\s*\([^)]*\)\s*)?void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                      r"([A-Za-z_]\w*)\s*\(", masked[m.end():])
        if nm and nm.group(1) not in names:
            names.append(nm.group(1))
    return names
