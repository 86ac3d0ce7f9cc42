#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Static evidence of fusion without a GPU.

Compiles each case of ptx_cases.cu to PTX (nvcc) and to SASS (ptxas -v) and
checks, per case: exactly one contiguous-path kernel and one general-path
kernel and no other kernel (no temporaries, no second pass); on the contiguous
path the expected number of 16-byte global loads (one per input) and stores;
no register spills and no local memory. Row kernels copy the rows their
passes share into shared memory first (16-byte global loads, four in flight
per thread, and 16-byte shared stores), then the passes read through
generic 16-byte loads (the row is in shared memory when it fit the cache,
else in global memory). A whole-tensor reduction (one cub::DeviceReduce
call) reads a contiguous aligned input in 16-byte vectors: its main kernel
has a run of such loads with no branch between them (a thread's loads of a
tile are all issued before the first is used; a branch per load keeps one
load in flight per thread wherever a load's value is used before the next
branch, as an item's combine or a fused expression's arithmetic uses it).
A plain tensor is handed to CUB as a pointer, so the kernel is CUB's own
vectorized one (its 16 items per thread in 4 vectors: a run of 4); a fused
expression's kernel reads 16-byte items (16 per thread: a run of at least
REDUCE_RUN). An axis reduction (one
axis_reduce_kernel in a linear and a coordinates form, and the kernel that
combines chunks) reads rows of a contiguous aligned input in 16-byte vectors,
AXIS_RUN of them in a row without a branch, and reads across rows AXIS_RUN
scalar loads in a row. A scan across rows (cross_scan_kernel) issues a
thread's SCAN_RUN loads together; the tile scans (the look-back scan of one
long row, the look-back across rows of few long lines, and rows of several
tiles) issue a whole tile's SCAN_TILE_RUN loads together; the kernel of
rows up to 1024 (warp_scan_kernel) issues a lane's SCAN_WARP_LOADS loads
of a pass together; the look-back scans of floats
(along a row, across rows) publish each tile's status and value as one
64-bit word with a release store and read it with one acquire load (no
32-bit status loads).
loom's sum of a plain tensor compiles to the vectorized tile of a direct
cub::DeviceReduce::Sum over the same pointer and count (case 13): the same
instructions in the same order with the same data flow, register numbers
and the operand order of commutative instructions aside (CUB reduces a
thread's items as a tree only for its own functors, such as plus<>; for
any other, one after the other, a chain of dependent adds).
Prints one report line per kernel.
Exit status 0 when every check holds.
"""
import argparse
import os
import re
import subprocess
import sys

# case: (description, 16-byte loads, 16-byte stores) on the contiguous path
# (elementwise) or on the vector form of the row kernel (rows: generic loads,
# one per leaf occurrence in a reduction pass or the output pass).
# One load per leaf occurrence: a tensor named twice in an elementwise
# expression is loaded twice by the same thread (the second load hits L1, so
# device memory is still read once).
CASES = {
    0: ("float  y = a * b + c", 3, 1),
    1: ("bf16   y = gelu(a * b + c)", 3, 1),
    2: ("float  y = silu(x * w_row + 1)", 2, 1),
    3: ("bf16   y = gelu(x * g_row + b_row) + r", 4, 1),
    4: ("half   y = 16-node tree, a x5 and b x4", 9, 1),
    # softmax: code for max, max (the duplicate, skipped at run time after
    # its check), sum, output: 4 loads in the code; x is read from device
    # memory once, by the copy into the row cache.
    5: ("bf16   rows: y = softmax(x)", 4, 1),
    6: ("bf16   rows: y = rms_norm(x, w)", 4, 1),
    # bf16 in, float out: a vector step is 8 columns (16 bytes of bf16, two
    # 16-byte float stores), never a half-filled 16-byte access.
    7: ("bf16->f32 rows: y = softmax(x)", 4, 2),
    # dropout's mask is Philox in registers: no load for it.
    14: ("bf16   y = dropout(x + b_row) + r", 3, 1),
    # rank 3 ([B, T, C], the transformer's activations): the same loads and
    # one 16-byte store per vector step, as at rank 2.
    15: ("bf16   rows: y = softmax(x), rank 3", 4, 1),
    16: ("f32    rows: y = softmax(x), rank 3", 4, 1),
    # an embedding reads its table run with one 16-byte load (the id is one
    # 8-byte load per run), pos with another.
    19: ("bf16   y = embedding(ids, table) * 2 + pos", 2, 1),
    # packed fp4 weights: a vector step is 32 values, one 16-byte load of
    # w4's bytes, eight each of the per-column scales and x, eight stores.
    20: ("f32    y = dequantize(unpack(w4), s_col) * x", 17, 8),
    # a layer's body uses a 5 times, b 5 times, c 3 times: the plain kernel
    # loads per use; the shared one (SHARED_CASES) once per argument.
    21: ("f32    layer: 30 nodes, 3 args used 13x", 13, 1),
    # a plain expression over a named subexpression t = x * w + b used 5
    # times: the plain kernel loads x, w and b per use of t.
    22: ("f32    y = gelu written out over t = x*w+b", 15, 1),
    # case 21's body written as a plain expression.
    23: ("f32    plain: 3 tensors of one type used 13x", 13, 1),
}
# case: 16-byte loads of contiguous_shared_kernel, the form of the contiguous
# path that loads each argument of a loom::layer call once per vector step,
# and in a plain expression of 8 loads or more each repeated tensor (up to
# 3 per leaf type, each a slot) and each repeated subexpression of maps over
# tensors (2 slots); it is chosen at launch when the uses fit (the plain
# contiguous_kernel stays for a layer called twice on different data, or a
# fourth tensor of one type). It must also use no more registers than the
# plain form. Case 4: a and b, one type, fill 2 of 3 slots (the third
# slot's load is in the code, skipped at run time); case 22: x, w and b once
# (t computed once; the loads of t's second slot are in the code, skipped);
# case 23: a, b and c in three slots.
SHARED_CASES = {4: 3, 21: 3, 22: 6, 23: 3}
ROW_CASES = {5, 6, 7, 15, 16}
# softmax row cases: the vector width of their vector form. The kept value
# e = exp(x - row_max(x)) (docs/04_layers.md) is chosen at launch: each
# occurrence of it has a mode (compute 0, store 1, read 2, a byte of the
# kernel's parameters) that the code branches on, so both forms are in the
# kernel. check_kept_exp follows the branches for given modes and counts the
# ex2 instructions that can run: one occurrence storing and the others
# reading (the row fits the cache) must leave one ex2 per element (the
# vector step's width and one in the scalar tail of the vector form; one in
# the general form); all computing (it does not fit), two.
EXP_CASES = {5: 8, 7: 8, 15: 8, 16: 4}
# case: (description of a whole-tensor reduction, the form of its kernel with
# 16-byte loads, the shortest run of them allowed). "pointer": CUB's kernel
# over the tensor's pointer (cub's policy for 4-byte items on sm_90: 16 items
# per thread in 4 16-byte vectors); "vector": loom's 16-byte items.
REDUCE_RUN = 8
REDUCE_CASES = {8: ("float  y = sum(x), whole tensor", "pointer", 4),
                11: ("float  y = max(x), whole tensor", "pointer", 4),
                12: ("float  y = sum(a * b), whole tensor", "vector", REDUCE_RUN)}
# case: most float comparisons per element in the pointer kernel's 16-byte
# loop (the NaN-propagating max: one NaN test of the accumulator and one
# unordered comparison; "b != b | b > a" took three and two predicate ops).
REDUCE_COMPARES = {11: 2}
FLOAT_SETP = re.compile(r"\bsetp\.[a-z.]+\.f32\b")
# case: loom's sum(x) and a direct cub::DeviceReduce::Sum in one file.
VERSUS_CUB_CASES = {13: "float  y = sum(x) vs direct CUB Sum"}
# case: description of a file of many assignments whose kernels (every one
# of them: row kernels of both forms, the reductions and elementwise kernels
# around them) must compile without spills or a stack frame.
# loom's own kernels are checked (CUB's kernels over loom's items are
# listed, not held to it); row kernels also have no stack frame (the scan
# kernels may keep a coordinate array there, as in check_scan).
SPILL_CASES = {17: "heavier row layers, float / bf16 / bf16 + f32 w",
               18: "cumsum(x > 0, 0); cummax/cummin of trees"}
# case: description of an axis reduction
AXIS_CASES = {9: "float  y = sum(x, 1), along an axis"}
AXIS_RUN = 4
# case: description of a scan
SCAN_CASES = {10: "float  y = cumsum(x, 0)"}
SCAN_RUN = 8
# A float scan tile is 16 elements per thread (scan_items): a whole tile's
# loads are issued together, without a bounds check each.
SCAN_TILE_RUN = 16
SCAN_WARP_LOADS = 8  # warp_scan_kernel's linear form: a lane's warp_scan_items loads of a pass, then the scans
ACQUIRE = re.compile(r"\bld\.acquire\.gpu\b")
# A float tile's status and value: one 64-bit word (lookback_packed).
ACQUIRE64 = re.compile(r"\bld\.acquire\.gpu(?:\.global)?\.b64\b")
RELEASE64 = re.compile(r"\bst\.release\.gpu(?:\.global)?\.b64\b")
# The row-cache copy in both forms of the row kernel: 16-byte global loads
# (four in flight, then one per remaining 16 bytes) and as many shared stores.
ROW_COPY_V4 = 5

ENTRY = re.compile(r"^\.(?:visible )?\.entry\s+(\S+?)\(", re.M)
SCALAR_LOAD = re.compile(r"\bld\.global(?:\.nc)?(?:\.L1::\S+)?\.(?:f|b|u|s)32\b")
V4_LOAD = re.compile(r"\bld\.global(?:\.nc)?(?:\.L1::\S+)?\.v4\.")
# A 16-byte global load as CUB's pointer kernel issues it too (a float4 read
# as two 64-bit words).
LOAD16 = re.compile(r"\bld\.global(?:\.nc)?(?:\.L1::\S+)?\.(?:v4\.(?:f|b|u|s)32|v2\.(?:f|b|u|s)64)\b")
V4_STORE = re.compile(r"\bst\.global(?:\.\S+)?\.v4\.")
V4_GENERIC_LOAD = re.compile(r"\bld(?:\.L1::\S+)?\.v4\.")
V4_SHARED_STORE = re.compile(r"\bst\.shared\.v4\.")
PTXAS = re.compile(r"Compiling entry function '(\S+)'.*?(\d+) bytes stack frame, (\d+) bytes spill stores, "
                   r"(\d+) bytes spill loads.*?Used (\d+) registers", re.S)


def entries(ptx):
    """Splits PTX into {entry name: body}."""
    out = {}
    marks = [(m.start(), m.group(1)) for m in ENTRY.finditer(ptx)]
    for i, (start, name) in enumerate(marks):
        end = marks[i + 1][0] if i + 1 < len(marks) else len(ptx)
        out[name] = ptx[start:end]
    return out


def longest_run(body, pattern):
    """Most loads matching `pattern` in a row with no branch or label between them."""
    best = cur = 0
    for line in body.splitlines():
        if pattern.search(line):
            cur += 1
            best = max(best, cur)
        elif re.search(r"\bbra\b", line) or line.startswith("$L__"):
            cur = 0
    return best


def check_reduce(case, ents, stats, failures):
    """The reduction's CUB kernels: no spills; the 16-byte form's loads in runs."""
    desc, want_kind, want_run = REDUCE_CASES[case]
    kernels = [n for n in ents if "DeviceReduce" in n and "SingleTile" not in n]
    wide = [n for n in kernels if LOAD16.search(ents[n])]
    if len(wide) != 1:
        failures.append(f"case {case} ({desc}): expected one DeviceReduceKernel with 16-byte loads, "
                        f"found {len(wide)} of {len(kernels)}")
        return
    for name in kernels:
        kind = ("pointer" if "lift_value" in name else "vector") if name in wide else "coords"
        run = longest_run(ents[name], LOAD16)
        stack, spill, regs = stats.get(name, (-1, -1, -1))
        print(f"{desc:<42} {kind:<12} {len(LOAD16.findall(ents[name])):>5} {0:>5} {'run ' + str(run):>5} "
              f"{regs:>4} {spill:>5} {stack:>5}")
        if name not in stats:
            failures.append(f"case {case}: no ptxas report for {kind} kernel")
        # The coordinates form indexes its coordinate array by a run-time
        # axis number (axis_map), which puts that array on the stack: allowed
        # there, spills are not.
        if spill != 0 or (stack != 0 and name in wide):
            failures.append(f"case {case} ({desc}): {kind} kernel spills {spill} bytes, stack {stack} bytes")
        if name in wide and kind != want_kind:
            failures.append(f"case {case} ({desc}): the kernel with 16-byte loads is the {kind} form, "
                            f"expected the {want_kind} form")
        if name in wide and run < want_run:
            failures.append(f"case {case} ({desc}): at most {run} 16-byte loads in a row without a branch, "
                            f"expected at least {want_run}")
        if name in wide and case in REDUCE_COMPARES:
            loads, compares = vector_loop_counts(ents[name])
            per = compares / (4 * loads) if loads else float("inf")
            print(f"{'':<42} {'compares':<12} {compares} float comparisons for {4 * loads} elements "
                  f"({per:.2f} each)")
            if per > REDUCE_COMPARES[case]:
                failures.append(f"case {case} ({desc}): {compares} float comparisons for the {4 * loads} elements "
                                f"of the 16-byte loop, more than {REDUCE_COMPARES[case]} per element")


def vector_loop_counts(body):
    """16-byte loads and float comparisons from the first 16-byte load to the
    next branch: the straight-line body of the kernel's vectorized tile."""
    lines = body.splitlines()
    first = next((i for i, line in enumerate(lines) if LOAD16.search(line)), None)
    if first is None:
        return 0, 0
    end = next((i for i in range(first, len(lines)) if re.search(r"\bbra\b", lines[i])), len(lines))
    block = lines[first:end]
    return (sum(1 for line in block if LOAD16.search(line)), sum(1 for line in block if FLOAT_SETP.search(line)))


def vector_tiles(body):
    """Every straight-line block (label to branch) with a 16-byte load: the
    kernel's vectorized tiles (CUB's first tile, peeled, and the loop over
    the others), as normalize_block's data flow."""
    tiles, block = [], []
    for line in body.splitlines() + ["$L__end:"]:
        line = line.split("//")[0].strip()
        if line.startswith("$L__"):
            block = []
            continue
        block.append(line)
        if re.search(r"\bbra\b", line) or line.startswith("$L__end"):
            if any(LOAD16.search(x) for x in block):
                tiles.append(normalize_block(block))
            block = []
    return tiles


COMMUTATIVE = {"add", "mul", "min", "max", "and", "or", "xor"}
REG = re.compile(r"%[a-z]+\d+")


def normalize_block(block):
    """A block's data flow, independent of register numbering and of the
    operand order of commutative instructions: each instruction becomes its
    opcode and the ids of its source values, a value being interned by the
    instruction that made it and its sources (registers live into the block
    are one value per register class). Moves between registers are dropped
    (ptxas removes them; later uses read the source)."""
    ids, val, out = {}, {}, []

    def intern(key):
        return ids.setdefault(key, len(ids))

    def source(tok):
        if REG.fullmatch(tok):
            return val.get(tok, intern(("in", re.match(r"%[a-z]+", tok).group(0))))
        return intern(("text", REG.sub("%", tok)))

    for line in block:
        line = re.sub(r"\$L__\w+", "$L", line).rstrip(";").strip()
        if not line:
            continue
        guard = None
        if line.startswith("@"):
            guard, line = line.split(None, 1)
        parts = line.split(None, 1)
        op, args = parts[0], (parts[1] if len(parts) > 1 else "")
        groups = [g.strip() for g in re.findall(r"\{[^}]*\}|\[[^\]]*\]|[^,]+", args) if g.strip()]
        move = re.fullmatch(r"mov\.[bfu](?:32|64)", op) and len(groups) == 2 and all(REG.fullmatch(g) for g in groups)
        if move:
            val[groups[0]] = source(groups[1])
            continue
        has_dest = not (op.startswith(("st.", "bra", "ret", "bar", "red.", "prefetch")))
        dests = (REG.findall(groups[0]) if groups[0].startswith("{") else [groups[0]]) if has_dest and groups else []
        srcs = []
        for g in groups[1:] if dests else groups:
            regs = REG.findall(g)
            if g.startswith(("{", "[")) or len(regs) != 1 or regs[0] != g:
                srcs.append(intern(("mem" if g.startswith("[") else "group", REG.sub("%", g),
                                    tuple(source(r) for r in regs))))
            else:
                srcs.append(source(g))
        if guard:
            srcs.append(source(guard.lstrip("@!")))
        if op.split(".")[0] in COMMUTATIVE:
            srcs = sorted(srcs)
        sig = (op, tuple(srcs), len(dests))
        out.append(sig)
        made = intern(sig)
        for k, d in enumerate(dests):
            val[d] = intern(("value", made, k))
    return out


def check_versus_cub(case, desc, ents, stats, failures):
    """loom's pointer kernel against CUB's own Sum kernel: the same
    instructions in its vectorized tile, no spills."""
    forms = find_forms(case, desc, ents, {
        "loom": [n for n in ents if "DeviceReduceKernel" in n and "lift_value" in n],
        "cub": [n for n in ents if "DeviceReduceKernel" in n and "plus" in n and "lift_value" not in n]}, failures)
    if not forms:
        return
    tiles = {k: vector_tiles(ents[n]) for k, n in forms.items()}
    for kind, name in forms.items():
        body = ents[name]
        stack, spill, regs = stats.get(name, (-1, -1, -1))
        print(f"{desc:<42} {kind:<12} {len(LOAD16.findall(body)):>5} {0:>5} {'run ' + str(longest_run(body, LOAD16)):>5} "
              f"{regs:>4} {spill:>5} {stack:>5}")
        print(f"{'':<42} {'tiles':<12} {len(tiles[kind])} blocks with 16-byte loads, "
              f"{sum(len(t) for t in tiles[kind])} instructions")
        if name not in stats:
            failures.append(f"case {case}: no ptxas report for {kind} kernel")
        if spill != 0 or stack != 0:
            failures.append(f"case {case} ({desc}): {kind} kernel spills {spill} bytes, stack {stack} bytes")
    loom, cub = tiles["loom"], tiles["cub"]
    if not cub or loom != cub:
        which = next((i for i, (x, y) in enumerate(zip(loom, cub)) if x != y), min(len(loom), len(cub)))
        failures.append(f"case {case} ({desc}): loom's vectorized tiles ({[len(t) for t in loom]} instructions) "
                        f"are not CUB's own ({[len(t) for t in cub]}); block {which} differs")


LABEL = re.compile(r"^(\$L__\w+):")
BRANCH = re.compile(r"^(@(!?)(%p\d+)\s+)?bra(?:\.uni)?\s+(\$L__\w+);")
MODE_TEST = re.compile(r"^setp\.(eq|ne)\.s16\s+(%p\d+),\s*(%rs\d+),\s*([12]);")
EX2 = re.compile(r"\bex2\.")


def basic_blocks(body):
    """[(label, [instructions])] in order (the entry block's label is None)."""
    out, cur, name = [], [], None
    for raw in body.splitlines():
        line = raw.split("//")[0].strip()
        if not line:
            continue
        m = LABEL.match(line)
        if m:
            out.append((name, cur))
            name, cur = m.group(1), []
        else:
            cur.append(line)
    out.append((name, cur))
    return out


def reachable_ex2(blocks, modes):
    """ex2 instructions in the blocks reachable from the entry when each mode
    register holds modes[register]: a branch on a comparison of a mode
    register goes one way, any other branch both ways."""
    index = {name: i for i, (name, _) in enumerate(blocks)}
    known = {}
    for _, ins in blocks:
        for line in ins:
            m = MODE_TEST.match(line)
            if m and m.group(3) in modes:
                equal = modes[m.group(3)] == int(m.group(4))
                known[m.group(2)] = equal if m.group(1) == "eq" else not equal
    seen, todo, count = set(), [0], 0
    while todo:
        i = todo.pop()
        if i in seen or i >= len(blocks):
            continue
        seen.add(i)
        ins = blocks[i][1]
        count += sum(1 for line in ins if EX2.search(line))
        falls = True
        for line in ins:
            if line.startswith(("ret", "exit")):
                falls = False
                break
            m = BRANCH.match(line)
            if not m:
                continue
            target = index[m.group(4)]
            value = known.get(m.group(3)) if m.group(3) else True
            if value is None:
                todo.append(target)
            elif value != (m.group(2) == "!"):
                todo.append(target)
                falls = False
                break
        if falls:
            todo.append(i + 1)
    return count


def check_kept_exp(case, desc, kind, body, per_element, failures):
    """The ex2 a softmax row kernel runs with its kept value stored once and
    read after, and with every occurrence computing it (see EXP_CASES):
    `per_element` of them is one per element of its loops (a vector step and
    the scalar tail; 1 in the general form)."""
    blocks = basic_blocks(body)
    regs = sorted({m.group(3) for _, ins in blocks for line in ins for m in [MODE_TEST.match(line)] if m})
    if len(regs) < 2:
        failures.append(f"case {case} ({desc}): {kind} kernel branches on {len(regs)} kept-value modes, expected 2 "
                        f"or more (a pass that stores the value, one that reads it)")
        return
    kept = {reachable_ex2(blocks, {r: (1 if r == s else 2) for r in regs}) for s in regs}
    computing = reachable_ex2(blocks, {r: 0 for r in regs})
    print(f"{'':<42} {'ex2':<12} kept: {sorted(kept)}, computing: {computing} (one per element: {per_element})")
    if kept != {per_element} or computing != 2 * per_element:
        failures.append(f"case {case} ({desc}): {kind} kernel runs {sorted(kept)} ex2 with the value kept and "
                        f"{computing} computing it, expected {per_element} (one per element) and "
                        f"{2 * per_element}")


def find_forms(case, desc, ents, forms, failures):
    """{kind: kernel name} when each kind matched exactly one kernel, else None."""
    if any(len(v) != 1 for v in forms.values()):
        failures.append(f"case {case} ({desc}): expected one kernel of each of {list(forms)}, found "
                        f"{ {k: len(v) for k, v in forms.items()} }")
        return None
    return {k: v[0] for k, v in forms.items()}


def report(case, desc, kind, name, body, run, stats, stack_ok, failures):
    """Prints a kernel's line; no ptxas report, spills, or a stack where none is allowed fail."""
    stack, spill, regs = stats.get(name, (-1, -1, -1))
    print(f"{desc:<42} {kind:<12} {len(V4_LOAD.findall(body)):>5} {0:>5} {'run ' + str(run):>5} "
          f"{regs:>4} {spill:>5} {stack:>5}")
    if name not in stats:
        failures.append(f"case {case}: no ptxas report for {kind} kernel")
    if spill != 0 or (stack != 0 and not stack_ok):
        failures.append(f"case {case} ({desc}): {kind} kernel spills {spill} bytes, stack {stack} bytes")


def check_axis(case, desc, ents, stats, failures):
    """axis_reduce_kernel: the linear form's row loads are 16-byte vectors in
    runs; both forms read across rows in runs of scalar loads; no spills."""
    forms = find_forms(case, desc, ents, {
        "linear": [n for n in ents if "axis_reduce_kernel" in n and "Lb1E" in n],
        "coords": [n for n in ents if "axis_reduce_kernel" in n and "Lb0E" in n],
        "combine": [n for n in ents if "axis_combine_kernel" in n]}, failures)
    for kind, name in (forms or {}).items():
        body = ents[name]
        v4 = longest_run(body, V4_LOAD)
        scalar = longest_run(body, SCALAR_LOAD)
        # As for whole reductions, the coordinates form's array indexed by a
        # run-time axis number may live on the stack; nothing may spill.
        report(case, desc, kind, name, body, v4, stats, kind == "coords", failures)
        if kind == "linear" and v4 < AXIS_RUN:
            failures.append(f"case {case} ({desc}): linear kernel has at most {v4} 16-byte loads in a row, "
                            f"expected at least {AXIS_RUN}")
        if scalar < AXIS_RUN:
            failures.append(f"case {case} ({desc}): {kind} kernel has at most {scalar} loads in a row, "
                            f"expected at least {AXIS_RUN}")


def check_spills(case, desc, ents, stats, failures):
    """loom's kernels of the file: a ptxas report with no spills, and no
    stack frame for a row kernel."""
    kinds = {"vector rows": 0, "general rows": 0, "other": 0}
    for name in ents:
        if "EmptyKernel" in name:
            continue
        kind = ("vector rows" if re.search(r"row_kernelILi\d+ELb1E", name) else
                "general rows" if re.search(r"row_kernelILi\d+ELb0E", name) else "other")
        kinds[kind] += 1
        stack, spill, regs = stats.get(name, (-1, -1, -1))
        stack_ok = kind == "other"
        if not name.startswith("_ZN4loom"):
            continue
        if name not in stats:
            failures.append(f"case {case}: no ptxas report for kernel {name[:120]}")
        elif spill != 0 or (stack != 0 and not stack_ok):
            failures.append(f"case {case} ({desc}): kernel spills {spill} bytes, stack {stack} bytes, "
                            f"{regs} registers: {name[:300]}")
    most = {k: max([stats.get(n, (0, 0, 0))[2] for n in ents if "EmptyKernel" not in n and
                    (k == "other" or re.search(r"row_kernelILi\d+ELb%dE" % (k == "vector rows"), n))] or [0])
            for k in kinds}
    for kind, count in kinds.items():
        print(f"{desc:<42} {kind:<12} {count:>5} kernels, at most {most[kind]} registers")
    if kinds["vector rows"] == 0 and kinds["other"] == 0:
        failures.append(f"case {case} ({desc}): no kernel found")


def check_scan(case, desc, ents, stats, failures):
    """cross_scan_kernel's loads in runs; the look-back scan's flags ordered; no spills."""
    forms = find_forms(case, desc, ents, {
        "across rows": [n for n in ents if "cross_scan_kernel" in n],
        "across l-b": [n for n in ents if "cross_lookback_kernel" in n],
        "look-back": [n for n in ents if "lookback_scan_kernel" in n and "Lb1E" in n],
        "row tiles": [n for n in ents if "row_tile_scan_kernel" in n and "Lb1E" in n],
        "warp rows": [n for n in ents if "warp_scan_kernel" in n and "Lb1E" in n]}, failures)
    for kind, name in (forms or {}).items():
        body = ents[name]
        run = longest_run(body, SCALAR_LOAD)
        # The tile kernels write through scan_out, whose coordinates
        # (indexed by a run-time axis number) may live on the stack.
        report(case, desc, kind, name, body, run, stats, kind not in ("across rows", "across l-b"), failures)
        want = {"across rows": SCAN_RUN, "warp rows": SCAN_WARP_LOADS}.get(kind, SCAN_TILE_RUN)
        if run < want:
            failures.append(f"case {case} ({desc}): {kind} kernel has at most {run} loads in a row, "
                            f"expected at least {want}")
        if kind in ("look-back", "across l-b"):
            acquires, wide = len(ACQUIRE.findall(body)), len(ACQUIRE64.findall(body))
            # Three publications: tile 0's inclusive prefix, an aggregate, an inclusive prefix.
            if wide == 0 or wide != acquires or len(RELEASE64.findall(body)) < 3:
                failures.append(f"case {case} ({desc}): {kind} kernel reads {acquires} tile states with "
                                f"acquire loads, {wide} of them 64-bit, and publishes "
                                f"{len(RELEASE64.findall(body))} with 64-bit release stores: expected every "
                                f"read to be one 64-bit word (status and value), and at least 3 publications")


def heavy_cases():
    """The cases that compile loom's umbrella header with CUB and Thrust and
    many kernels (--group heavy); every other case is in --group light."""
    return set(REDUCE_CASES) | set(AXIS_CASES) | set(SCAN_CASES) | set(SPILL_CASES) | set(VERSUS_CUB_CASES)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nvcc", required=True)
    ap.add_argument("--source", required=True)
    ap.add_argument("--include", required=True)
    ap.add_argument("--arch", default="90")
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--cases", help="comma-separated case numbers to check (default: all)")
    ap.add_argument("--group", choices=("heavy", "light"),
                    help="only the cases of one group (CTest runs the two side by side): 'heavy' the "
                         "reductions, scans and files of many kernels (heavy_cases), 'light' the others")
    args = ap.parse_args()
    os.makedirs(args.workdir, exist_ok=True)

    failures = []
    cases = dict(CASES)
    cases.update({c: (d[0], 0, 0) for c, d in REDUCE_CASES.items()})
    cases.update({c: (d, 0, 0) for c, d in AXIS_CASES.items()})
    cases.update({c: (d, 0, 0) for c, d in SPILL_CASES.items()})
    cases.update({c: (d, 0, 0) for c, d in SCAN_CASES.items()})
    cases.update({c: (d, 0, 0) for c, d in VERSUS_CUB_CASES.items()})
    if args.group:
        heavy = heavy_cases()
        cases = {c: d for c, d in cases.items() if (c in heavy) == (args.group == "heavy")}
    if args.cases:
        try:
            wanted = {int(c) for c in args.cases.split(",") if c.strip()}
        except ValueError:
            sys.exit(f"check_ptx.py: --cases takes comma-separated numbers, got '{args.cases}'")
        unknown = wanted - set(cases)
        if unknown:
            sys.exit(f"check_ptx.py: no case {sorted(unknown)}; the cases are {sorted(cases)}")
        cases = {c: d for c, d in cases.items() if c in wanted}
    print(f"{'case':<42} {'kernel':<12} {'v4 ld':>5} {'v4 st':>5} {'copy':>5} {'regs':>4} {'spill':>5} {'stack':>5}")
    for case, (desc, want_loads, want_stores) in cases.items():
        ptx_path = f"{args.workdir}/case{case}.ptx"
        cmd = [args.nvcc, "-std=c++20", "--expt-relaxed-constexpr", "--extended-lambda", f"-arch=sm_{args.arch}",
               "-I", args.include, f"-DLOOM_PTX_CASE={case}", "-ptx", args.source, "-o", ptx_path]
        subprocess.run(cmd, check=True)
        with open(ptx_path) as f:
            ptx = f.read()
        sass = subprocess.run([os.path.join(os.path.dirname(args.nvcc), "ptxas"), f"-arch=sm_{args.arch}", "-v", ptx_path, "-o",
                               f"{args.workdir}/case{case}.cubin"], check=True, capture_output=True, text=True)
        stats = {m.group(1): (int(m.group(2)), int(m.group(3)) + int(m.group(4)), int(m.group(5)))
                 for m in PTXAS.finditer(sass.stdout + sass.stderr)}
        ents = entries(ptx)
        if case in REDUCE_CASES:
            check_reduce(case, ents, stats, failures)
            continue
        if case in AXIS_CASES:
            check_axis(case, desc, ents, stats, failures)
            continue
        if case in SCAN_CASES:
            check_scan(case, desc, ents, stats, failures)
            continue
        if case in SPILL_CASES:
            check_spills(case, desc, ents, stats, failures)
            continue
        if case in VERSUS_CUB_CASES:
            check_versus_cub(case, desc, ents, stats, failures)
            continue
        if case in ROW_CASES:
            # The vector form is row_kernel's bool argument right after the width
            # (an operator's own bool argument, as row_extreme_op's, comes later).
            kinds = {"vector rows": [n for n in ents if re.search(r"row_kernelILi\d+ELb1E", n)],
                     "general rows": [n for n in ents if re.search(r"row_kernelILi\d+ELb0E", n)]}
        else:
            kinds = {"contiguous": [n for n in ents if "contiguous_kernel" in n],
                     "general": [n for n in ents if "general_kernel" in n]}
            if case in SHARED_CASES:
                kinds["shared"] = [n for n in ents if "contiguous_shared_kernel" in n]
        found = [n for names in kinds.values() for n in names]
        # CUB defines an empty kernel in every translation unit that includes
        # it (the umbrella header does, for the reductions); it is never launched.
        others = [n for n in ents if n not in found and "EmptyKernel" not in n]
        if any(len(names) != 1 for names in kinds.values()) or others:
            failures.append(f"case {case} ({desc}): expected one kernel of each of {list(kinds)}, found "
                            f"{ {k: len(v) for k, v in kinds.items()} }, others {others}")
            continue
        for kind, names in kinds.items():
            name = names[0]
            body = ents[name]
            loads, stores = len(V4_LOAD.findall(body)), len(V4_STORE.findall(body))
            copy = 0
            if case in ROW_CASES:
                copy = loads
                loads = len(V4_GENERIC_LOAD.findall(body))
                if copy != ROW_COPY_V4 or len(V4_SHARED_STORE.findall(body)) != ROW_COPY_V4:
                    failures.append(f"case {case} ({desc}): {kind} kernel's row-cache copy has {copy} 16-byte global "
                                    f"loads and {len(V4_SHARED_STORE.findall(body))} 16-byte shared stores, "
                                    f"expected {ROW_COPY_V4} each")
            stack, spill, regs = stats.get(name, (-1, -1, -1))
            print(f"{desc:<42} {kind:<12} {loads:>5} {stores:>5} {copy:>5} {regs:>4} {spill:>5} {stack:>5}")
            if case in EXP_CASES:
                check_kept_exp(case, desc, kind, body, EXP_CASES[case] + 1 if kind == "vector rows" else 1, failures)
            if name not in stats:
                failures.append(f"case {case}: no ptxas report for {kind} kernel")
            if spill != 0 or stack != 0:
                failures.append(f"case {case} ({desc}): {kind} kernel spills {spill} bytes, stack {stack} bytes")
            if kind == "shared":
                plain_regs = stats.get(kinds["contiguous"][0], (-1, -1, -1))[2]
                if loads != SHARED_CASES[case] or stores != want_stores:
                    failures.append(f"case {case} ({desc}): shared kernel has {loads} 16-byte loads and {stores} "
                                    f"16-byte stores, expected {SHARED_CASES[case]} and {want_stores}")
                if regs > plain_regs:
                    failures.append(f"case {case} ({desc}): shared kernel uses {regs} registers, more than the "
                                    f"plain contiguous kernel's {plain_regs}")
                continue
            vector_kind = kind in ("contiguous", "vector rows")
            if vector_kind and (loads != want_loads or stores != want_stores):
                failures.append(f"case {case} ({desc}): {kind} kernel has {loads} 16-byte loads and {stores} "
                                f"16-byte stores, expected {want_loads} and {want_stores}")
            if not vector_kind and (loads or stores):
                failures.append(f"case {case} ({desc}): {kind} kernel uses vector accesses")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(cases)} cases, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
