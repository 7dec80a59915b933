#!/usr/bin/env python3
"""Writes direct_asm_avx512.inc or direct_asm_avx2.inc: the register tiles
of our direct convolution (cpu:float32:nchw16c/direct, .../nchw8c/direct and
the nhwc first layers) as inline assembly, for AVX-512 (zmm) or AVX2 (ymm).

Why assembly: the tiles use 28-32 of the 32 zmm registers. With intrinsics,
GCC 12 spills accumulators or folds every broadcast into its FMA
({1to16} memory operand); the folded form needs one load per FMA, and the
load ports then cap the tile near 80% of the FMA peak. Here each input
value is broadcast once into a register (vbroadcastss: a load-port uop) and
feeds OCB FMAs, which reaches the FMA peak on tiles of 4 x 6 (measured with
a probe of both forms: 223 vs 181 GFLOP/s on one core). 4 x 7 (rows of 7, 14,
28, 56 pixels) leaves no register for the fourth weight vector: its FMAs
take it from memory (L1).

A tile: OCB output-channel blocks (zmm weights) x W output pixels, OCB*W
accumulators. For OCB = 1 the broadcast feeds a single FMA, so it is folded.
Loops inside the assembly: input-channel blocks, then the kernel taps (byte
offsets from a table), then the 16 channels of the block (4 steps unrolled;
the last block only its channels rounded up to 4).

AVX2: 16 ymm and no embedded broadcast, so every tile broadcasts into a
register: 4 x 3 (one weight vector from memory), 2 x 6, 1 x 14 and the
two-row 1 x 2 x 7, and the split 2 x W tiles of planes walked flat across
their rows (TILES_SPLIT_AVX2); a block's 8 channels are unrolled whole. Intrinsics
(GCC) had reached 59-79% of the AVX2 peak on ResNet50's 3x3 layers, these
80-92% (SOFTNEURO_MAX_CPU_ISA=avx2 bench/conv_bench).

First-layer tiles (first_fn, conv::AsmFirstTile): nhwc input of 3 channels
read in place; per kernel row one loop over its columns, 3 channels each; a
3x3 kernel's inner tiles also as runs along a row, the 27 steps unrolled.

The build runs it (CMakeLists.txt): python3 gen_direct_asm.py OUTPUT.
"""
import pathlib
import sys

# (OCB, largest W): registers = OCB*W accumulators + OCB weights + temporaries.
TILES = [(4, 7), (3, 8), (2, 14), (1, 28)]
# Two-row tiles (OCB 2, W pixels of each of two output rows): a 7-pixel row
# alone gives each weight vector 7 FMAs, two rows give 14, halving the weight
# traffic that bounds small planes with many channels (ResNet50's 512@7).
# They read an input padded on every side (no edge tiles).
TILES_2ROW = [(2, 7)]
STRIDES = [1, 2]
# AVX2 (16 ymm, no embedded broadcast: every tile broadcasts into a register):
# 12 accumulators + weights + the broadcast.
TILES_AVX2 = [(4, 3), (2, 6), (1, 14)]
# AVX2 two-row tiles: 1 block x 2 rows of 7 (14 accumulators): rows of 7
# (ResNet50's 512-channel planes) otherwise take 1 x 7, whose 7 accumulators
# cannot hide the FMA latency (4 cycles x 2 ports), or leave a 1-pixel tail.
TILES_2ROW_AVX2 = [(1, 7)]
# Split tiles (OCB, largest W): a tile of a plane walked flat across its rows
# (AsmRow::span_ow, over an input without edges): its first `split` pixels end
# one row, the others (none when split = W) start the next, x_row2_bytes
# further than a straight walk would put them; every tap prefetches
# W_NEXT_PER_TAP bytes of the next pass's weights into L2 (AsmTile::w_next).
# AVX2: rows of 7 or 14 pixels then take whole 2 x 6 tiles instead of a narrow
# last tile per row (2 x 1, 2 x 2: FMA-latency bound) or the two-row 1 x 2 x 7
# (15 loads per 14 FMAs: load-port bound, ResNet50's 512@7 at 84% of the AVX2
# peak). (OCB, largest W, smallest W.) AVX-512 has none: ResNet50's and
# VGG16's rows (7 to 224 pixels, multiples of 7) take whole tiles of 7 or 14
# without splitting, and a 7x7 plane in 2 x 7 tiles that prefetch the next
# pass (0.73-0.79 ms) lost to the two-row 2 x 2 x 7 tiles (0.61-0.66 ms).
TILES_SPLIT_AVX2 = [(2, 6, 1)]
TILES_SPLIT = []

# The instruction set being written (set_isa): register name, registers,
# bytes and floats per vector, whether an FMA can broadcast from memory.
R, NREG, VB, V, EMB = "zmm", 32, 64, 16, True
UNROLL_BLOCK = False  # a block's channel steps unrolled whole (tile_fn)
Y_PREFETCH = False  # the next tile's output lines prefetched for writing (tile_fn)


def set_isa(isa):
    global R, NREG, VB, V, EMB, UNROLL_BLOCK, Y_PREFETCH, W_PREFETCH_CHOICE
    R, NREG, VB, V, EMB = ("zmm", 32, 64, 16, True) if isa == "avx512" else ("ymm", 16, 32, 8, False)
    UNROLL_BLOCK = isa == "avx2"
    # AVX2 only: ResNet50's 1x1 64->256@56 and 128->512@28 ran 3% faster
    # (0.57 -> 0.55, 0.55 -> 0.53 ms); on AVX-512 they ran 3-5% slower.
    Y_PREFETCH = isa == "avx2"
    W_PREFETCH_CHOICE = isa == "avx2"


def lines_of(first, nbytes):
    """Offsets of one byte in each 64-byte line of [first, first + nbytes),
    from a base aligned to a vector (half a line on AVX2)."""
    offs = list(range(first, first + nbytes, 64))
    if VB < 64 and nbytes > 32 and (first + nbytes - 1) not in offs:
        offs.append(first + nbytes - 1)
    return offs


# Each channel step prefetches its weight lines this many bytes ahead (into L1).
# The weights stream from L3 on layers with many channels (ResNet50's 512@7:
# 9.4 MB), and the hardware prefetchers stop at every 4 KB page: a tile then
# waits on L3 at each page. 4 KB ahead covers the L3 latency at our pace (128
# bytes per 14 cycles); past a block's end it fetches the next block's weights.
W_PREFETCH = 4096
# AVX2 also gets every tile without it (the _l2 tiles, AsmRow::w_prefetch 0):
# a prefetch per channel step costs 5-7% where the weights stay in L1/L2 (a
# probe of the 2 x 6 tile's steps in L1: 114-120 -> 107-112 GFLOP/s on one
# core; ResNet50's 1x1 layers 5-8%), where only the streamed weights of its
# 3x3 512-channel layers (9.4 MB) need it. AVX-512 tiles measured the same
# either way (VGG16's 3x3 layers), so they keep the one form.
W_PREFETCH_CHOICE = False
UNROLL = 4  # channel steps per loop iteration (16 / UNROLL iterations)

# AsmTile field offsets (conv_kernels.hpp): keep in step with the struct.
F_Y, F_X, F_W, F_TAP, F_NTAPS, F_ICBS, F_XICB, F_WICB, F_LOAD = 0, 8, 16, 24, 32, 40, 48, 56, 64
F_YOCB, F_BIAS, F_LO, F_HI, F_LAST, F_LSTEPS = 72, 80, 88, 92, 96, 104
F_XROW2, F_YROW, F_ZEROS, F_WNEXT = 112, 120, 128, 136
F_HS_ADD, F_HS_MAX, F_HS_MUL, F_SCALE, F_SHIFT, F_AFFINE = 144, 148, 152, 156, 160, 168
# Split tiles: bytes of the next pass's weights each tap prefetches into L2
# (AsmTile::w_next, Kernels::w_next_per_tap): 3/8 of what a tap reads per
# block on 2 x W AVX2 tiles (512 bytes), so that a pass of 3 tiles or more
# prefetches all of the next.
W_NEXT_PER_TAP = 192


def ocb_index(ocb):
    """A tile's index in the per-OCB tables of conv::Kernels (conv::ocb_index)."""
    return ocb - 1


def y_base(j, r=0):
    """Where oc block j of row r starts in y: block j at y + j * y_ocb (rax, r12 = y_ocb,
    r13 = rax + 2 * r12); a two-row tile's second row at rsi = rax + y_row."""
    if r == 1:
        return ["(%%rsi)", "(%%rsi,%%r12,1)"][j]
    return ["(%%rax)", "(%%rax,%%r12,1)", "(%%r13)", "(%%r13,%%r12,1)"][j]


def y_addr(j, i, r=0):
    """Accumulator (j, i) of row r in y."""
    return f"{i * VB}{y_base(j, r)}"


def registers(ocb, w):
    """Accumulators 0..n-1, the weight registers, the broadcast temporaries.
    When the accumulators leave no room for all weight vectors and a broadcast
    register (4 x 7), the last ones are FMA memory operands."""
    n = ocb * w
    fold = EMB and ocb == 1  # the broadcast folded into the FMA
    in_regs = ocb if fold else min(ocb, NREG - 1 - n)
    assert in_regs >= 1, (ocb, w)
    tmps = list(range(n + in_regs, NREG))
    assert fold or tmps, (ocb, w)
    return n, [n + j for j in range(in_regs)], tmps


def fma_steps(emit, ocb, w, steps, pixel_bytes, wreg, tmps, row_w=None, w_prefetch=0, edge_regs=False, first=0,
              split=0, x_reg="rdx", x_from=0):
    """`steps` input channels: weights [step][OCB][16] at r8, pixel i's channel
    at rdx + i * pixel_bytes + 4 * step; with row_w (two-row tiles), pixel i is
    column i % row_w of row i // row_w, the second row r12 bytes further; with
    split (split tiles), pixels from `split` on r12 bytes further.
    edge_regs: a row's first column read at rax, its last (of more than one)
    at r13, instead of from rdx (tile_fn: either may point at zeros).
    x_reg, x_from: the input read at x_reg, step u's channel at (u - x_from) * 4.
    Returns the temporaries used."""
    t = 0
    used = set()
    for u in range(first, first + steps):
        for j in range(len(wreg)):
            emit(f"vmovups {(u * ocb + j) * VB}(%%r8), %%{R}{wreg[j]}")
        if w_prefetch:
            for off in range(u * ocb * VB, (u + 1) * ocb * VB, VB):
                if off % 64 == 0:
                    emit(f"prefetcht0 {w_prefetch + off}(%%r8)")
        for i in range(w):
            col, row = (i, 0) if row_w is None else (i % row_w, i // row_w)
            if split:
                col, row = i, int(i >= split)
            cols = w if row_w is None else row_w
            base, off = x_reg, col * pixel_bytes
            if edge_regs and col == 0:
                base, off = "rax", 0
            elif edge_regs and col == cols - 1:
                base, off = "r13", 0
            src = f"{off + (u - x_from) * 4}(%%{base}{',%%r12,1' if row else ''})"
            if EMB and ocb == 1:
                emit(f"vfmadd231ps {src}%{{1to16%}}, %%{R}{wreg[0]}, %%{R}{i}")
                continue
            r = tmps[t % len(tmps)]
            used.add(r)
            t += 1
            emit(f"vbroadcastss {src}, %%{R}{r}")
            for j in range(ocb):
                if j < len(wreg):
                    emit(f"vfmadd231ps %%{R}{r}, %%{R}{wreg[j]}, %%{R}{j * w + i}")
                else:
                    emit(f"vfmadd231ps {(u * ocb + j) * VB}(%%r8), %%{R}{r}, %%{R}{j * w + i}")
    return used


def add_bias(emit, ocb, w):
    """The bias (r14: OCB vectors) onto every accumulator."""
    for j in range(ocb):
        for i in range(w):
            emit(f"vaddps {j * VB}(%%r14), %%{R}{j * w + i}, %%{R}{j * w + i}")


def clamp(emit, n, f_lo, f_hi, extended=False):
    """last (in rcx): 2 clamps to [lo, hi] (clip), 3 only from below (relu:
    no vminps against +inf); 1 leaves the sums (+ bias) as they are.
    The bound is broadcast into register n (a weight register, free here) and
    is the first source: vmaxps/vminps return the second where either is NaN,
    so a NaN sum stays NaN (a memory operand could only be the second).
    `extended` (AVX-512, AsmTile): also 4, hardswish, and after any of them
    y * scale + shift where AsmTile::affine (PP-LCNetV3's act_scale and
    act_shift), each as VAct computes it (the same operations in the same
    order); registers n to n + 3 (free: at most 28 accumulators)."""
    def bound(f):
        emit(f"vbroadcastss {f}(%[t]), %%{R}{n}")
        return f"%%{R}{n}"
    end = "15f" if extended else "12f"
    emit("cmp $1, %%rcx")
    emit(f"je {end}")
    if extended:
        emit("cmp $4, %%rcx")
        emit("je 16f")
    b = bound(f_lo)
    for k in range(n):
        emit(f"vmaxps %%{R}{k}, {b}, %%{R}{k}")
    emit("cmp $3, %%rcx")
    emit(f"je {end}")
    b = bound(f_hi)
    for k in range(n):
        emit(f"vminps %%{R}{k}, {b}, %%{R}{k}")
    if extended:
        # hardswish: x * (min(6, max(0, x + 3)) * (1/6)); t (n) second in max
        # and min, so a NaN stays NaN.
        t, zero, six = f"%%{R}{n}", f"%%{R}{n + 1}", f"%%{R}{n + 2}"
        emit("jmp 15f")
        emit("16:")
        emit(f"vpxord {zero}, {zero}, {zero}")
        emit(f"vbroadcastss {F_HS_MAX}(%[t]), {six}")
        for k in range(n):
            emit(f"vaddps {F_HS_ADD}(%[t])%{{1to16%}}, %%{R}{k}, {t}")
            emit(f"vmaxps {t}, {zero}, {t}")
            emit(f"vminps {t}, {six}, {t}")
            emit(f"vmulps {F_HS_MUL}(%[t])%{{1to16%}}, {t}, {t}")
            emit(f"vmulps {t}, %%{R}{k}, %%{R}{k}")
        emit("15:")
        emit(f"cmpq $0, {F_AFFINE}(%[t])")
        emit("je 12f")
        scale = f"%%{R}{n + 3}"
        emit(f"vbroadcastss {F_SCALE}(%[t]), {scale}")
        for k in range(n):
            emit(f"vfmadd213ps {F_SHIFT}(%[t])%{{1to16%}}, {scale}, %%{R}{k}")
    emit("12:")


def asm_function(name, struct, lines, zmm_used, gprs):
    """A C++ function running `lines` (emitted asm) on `const struct& t`,
    clobbering the general registers `gprs` and the vector registers used."""
    clob = ", ".join(f'"xmm{r}"' for r in sorted(zmm_used))
    gpr = ", ".join(f'"{r}"' for r in gprs)
    body = "\n".join(lines)
    return f"""void {name}(const {struct}& t) {{
  asm volatile(
{body}
      :
      : [t] "r"(&t)
      : {gpr}, "memory", "cc", {clob});
}}
"""


def tile_y(emit, ocb, w, rows, op):
    """op(accumulator, its place in y) for each of a tile's accumulators
    (j * rows * W + row * W + i); a two-row tile's second row through rsi."""
    if rows == 2:
        emit(f"mov {F_YROW}(%[t]), %%rsi")
        emit("add %%rax, %%rsi")
    for j in range(ocb):
        for r in range(rows):
            for i in range(w):
                op(j * rows * w + r * w + i, y_addr(j, i, r))


def tile_name(ocb, w, s, rows, w_prefetch, split=0):
    """A tile's function name; the form without the weight prefetch ends in _l2."""
    base = f"asm_tile_{ocb}x{w}_s{s}" if rows == 1 else f"asm_tile2r_{ocb}x{w}_s{s}"
    if split:
        base = f"asm_tile_{ocb}x{w}_s{s}_split{split}"
    return base if w_prefetch else base + "_l2"


def tile_fn(ocb, w, s, rows=1, w_prefetch=True, split=0):
    """OCB blocks x W pixels of `rows` output rows (1, or 2: AsmTile's x_row2_bytes
    and y_row_bytes apart, accumulator j * rows * W + row * W + i); w_prefetch:
    each channel step prefetches its weights W_PREFETCH bytes ahead; split
    (0 < split <= W, one row): the input of pixels split.. x_row2_bytes further
    (a tile across two rows of a plane walked flat; no edge columns), each tap
    prefetching the next pass's weights (AsmTile::w_next)."""
    wpf = W_PREFETCH if w_prefetch else 0
    px = rows * w  # pixels of the tile
    n, wreg, tmps = registers(ocb, px)
    a = []

    def emit(line):
        a.append(f'      "{line}\\n\\t"')

    def each_y(op):
        tile_y(emit, ocb, w, rows, op)

    # Accumulators: loaded from y (a later input-channel pass), else the bias
    # (a whole pass with the epilogue: no add at the end), else zero.
    emit(f"mov {F_Y}(%[t]), %%rax")
    emit(f"mov {F_YOCB}(%[t]), %%r12")
    emit("lea (%%rax,%%r12,2), %%r13")
    emit(f"cmpq $0, {F_LOAD}(%[t])")
    emit("je 10f")
    each_y(lambda k, m: emit(f"vmovups {m}, %%{R}{k}"))
    emit("jmp 11f")
    emit("10:")
    emit(f"cmpq $0, {F_LAST}(%[t])")
    emit("je 13f")
    emit(f"mov {F_BIAS}(%[t]), %%r14")
    for j in range(ocb):
        for i in range(px):
            emit(f"vmovups {j * VB}(%%r14), %%{R}{j * px + i}")
    emit("jmp 11f")
    emit("13:")
    for k in range(n):
        emit(f"{'vpxord' if EMB else 'vxorps'} %%{R}{k}, %%{R}{k}, %%{R}{k}")
    emit("11:")
    if Y_PREFETCH and rows == 1:
        # The next tile's output lines (w pixels on), for writing: their RFOs
        # overlap this tile's FMAs (short tiles of 1x1 layers wait on them).
        for j in range(ocb):
            for off in lines_of(w * VB, w * VB):
                emit(f"prefetchw {off}{y_base(j)}")
    if rows == 2 or 0 < split < w:
        emit(f"mov {F_XROW2}(%[t]), %%r12")  # y_ocb again at the end
    if split:
        emit(f"mov {F_WNEXT}(%[t]), %%r13")  # y's third block again at the end
    emit(f"mov {F_XICB}(%[t]), %%r15")
    emit(f"mov {F_X}(%[t]), %%r9")
    emit(f"mov {F_W}(%[t]), %%r10")
    emit(f"mov {F_ICBS}(%[t]), %%r11")
    emit("1:")  # input-channel blocks
    # r14 (the bias pointer outside the loops): channel steps of this block
    # (a partial last block: its padded channels are neither multiplied nor
    # their zero weights read, they are skipped after each tap; 24 channels =
    # 1.5 blocks).
    emit(f"mov ${V // UNROLL}, %%r14d")
    emit("cmp $1, %%r11")
    emit("jne 4f")
    # The last block prefetches the first block two tiles further along the
    # row (x + 2 * W * stride pixels; a two-row tile: four rows down): a block
    # past it would be traffic for nothing, and its own lines came too late
    # (MobileNetV2's 1x1 16->96 @112 at one thread: 0.29 ms, now 0.25; oneDNN 0.25).
    emit(f"mov {F_X}(%[t]), %%r15")
    emit("sub %%r9, %%r15")
    if rows == 2:
        emit("lea (%%r15,%%r12,4), %%r15")
    else:
        emit(f"add ${2 * w * s * VB}, %%r15")
    emit(f"mov {F_LSTEPS}(%[t]), %%r14")
    emit("4:")
    emit(f"mov {F_TAP}(%[t]), %%rsi")
    emit(f"mov {F_NTAPS}(%[t]), %%rdi")
    emit("mov %%r10, %%r8")
    emit("2:")  # taps
    # A tap's offset carries flags in its low 2 bits (offsets are whole floats):
    # 1: the row's first column lies outside the input, 2: its last one (of
    # more than one column). Those columns then read zeros (AsmTile::zeros)
    # through rax / r13 instead of the input: a tile on the input's edge runs
    # in place, in the same loop, without a padded copy.
    emit("mov (%%rsi), %%rdx")
    emit("mov %%edx, %%ecx")
    emit("and $-4, %%rdx")
    emit("add %%r9, %%rdx")
    # This tap's pixels in the next ic block, a whole plane further on: one
    # stream per block, more than the hardware prefetchers follow on large planes.
    def pixel_lines(first, count):  # of pixels first .. first + count - 1
        if s * VB < 64:
            return lines_of(first * s * VB, ((count - 1) * s + 1) * VB)
        return [(first + i) * s * VB for i in range(count)]

    row_lines = pixel_lines(0, split or w)
    for off in row_lines:
        emit(f"prefetcht0 {off}(%%rdx,%%r15,1)")
    if rows == 2 or 0 < split < w:
        emit("lea (%%rdx,%%r12,1), %%rax")  # rax: y only outside the loops
        for off in (row_lines if rows == 2 else pixel_lines(split, w - split)):
            emit(f"prefetcht0 {off}(%%rax,%%r15,1)")
    if split:
        # The next pass's weights into L2, spread over the taps of the pass's
        # tiles: a pass's first tile otherwise streams them from L3 at the rate
        # it reads them (2 x 6 AVX2: 64 bytes per 6 cycles, more than L3 gives
        # one core), every later tile of the pass finding them in L1.
        for off in range(0, W_NEXT_PER_TAP, 64):
            emit(f"prefetcht1 {off}(%%r13)")
        emit(f"add ${W_NEXT_PER_TAP}, %%r13")
    else:  # a split tile has no edge columns (no tap flags)
        emit("mov %%rdx, %%rax")
        emit(f"test ${3 if w == 1 else 1}, %%ecx")
        emit(f"cmovnz {F_ZEROS}(%[t]), %%rax")
        if w > 1:
            emit(f"lea {(w - 1) * s * VB}(%%rdx), %%r13")
            emit("test $2, %%ecx")
            emit(f"cmovnz {F_ZEROS}(%[t]), %%r13")
    if UNROLL_BLOCK:
        # The block's channels unrolled in groups of UNROLL steps, a partial
        # last block (r14 groups) leaving after its last: no loop and no
        # pointer updates per group (AVX2: +5-6% on ResNet50's 3x3 layers).
        used_tmps = set()
        for g in range(V // UNROLL):
            used_tmps |= fma_steps(emit, ocb, px, UNROLL, s * VB, wreg, tmps, w if rows == 2 else None, wpf,
                                   not split, first=g * UNROLL, split=split)
            if g + 1 < V // UNROLL:
                emit(f"cmp ${g + 1}, %%r14d")
                emit("je 5f")
        emit("5:")
        emit(f"add ${V * ocb * VB}, %%r8")
        return finish_tile(emit, a, ocb, w, rows, n, px, wreg, used_tmps, tile_name(ocb, w, s, rows, w_prefetch, split),
                           split)
    emit("mov %%r14d, %%ecx")
    emit("3:")  # channels of the block
    used_tmps = fma_steps(emit, ocb, px, UNROLL, s * VB, wreg, tmps, w if rows == 2 else None, wpf, not split,
                          split=split)
    emit(f"add ${UNROLL * 4}, %%rdx")
    if not split:
        emit(f"add ${UNROLL * 4}, %%rax")
    if w > 1 and not split:
        emit(f"add ${UNROLL * 4}, %%r13")
    emit(f"add ${UNROLL * ocb * VB}, %%r8")
    emit("dec %%ecx")
    emit("jnz 3b")
    # The channel steps a partial last block skipped (r14 of V / UNROLL ran).
    emit(f"mov ${V // UNROLL}, %%ecx")
    emit("sub %%r14d, %%ecx")
    emit(f"imul ${UNROLL * ocb * VB}, %%ecx, %%ecx")
    emit("add %%rcx, %%r8")
    return finish_tile(emit, a, ocb, w, rows, n, px, wreg, used_tmps, tile_name(ocb, w, s, rows, w_prefetch, split),
                       split)


def finish_tile(emit, a, ocb, w, rows, n, px, wreg, used_tmps, name, split=0):
    """tile_fn's end: the next tap, block; the epilogue; y; the function `name`."""
    def each_y(op):
        tile_y(emit, ocb, w, rows, op)

    emit("add $8, %%rsi")
    emit("dec %%rdi")
    emit("jnz 2b")
    emit(f"add {F_XICB}(%[t]), %%r9")
    emit(f"add {F_WICB}(%[t]), %%r10")
    emit("dec %%r11")
    emit("jnz 1b")
    # last >= 1: the bias (added here when the sums came from y), then clamp(); then y.
    emit(f"mov {F_Y}(%[t]), %%rax")
    if rows == 2 or 0 < split < w:
        emit(f"mov {F_YOCB}(%[t]), %%r12")
    emit("lea (%%rax,%%r12,2), %%r13")  # y_addr's third block again
    emit(f"mov {F_LAST}(%[t]), %%rcx")
    emit("test %%rcx, %%rcx")
    emit("je 12f")
    emit(f"cmpq $0, {F_LOAD}(%[t])")
    emit("je 14f")
    emit(f"mov {F_BIAS}(%[t]), %%r14")
    add_bias(emit, ocb, px)
    emit("14:")
    clamp(emit, n, F_LO, F_HI, extended=EMB)
    each_y(lambda k, m: emit(f"vmovups %%{R}{k}, {m}"))
    # 13 general registers at most: with a frame pointer (the ASan build) rbp is
    # taken, and %[t] needs one of the 14 others.
    assert not EMB or n + 4 <= NREG  # clamp()'s extended epilogue
    return asm_function(name, "AsmTile", a, set(range(n + 4 if EMB else n)) | set(wreg) | used_tmps,
                        ["rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"])


# AsmFirstTile field offsets (conv_kernels.hpp).
G_Y, G_X, G_W, G_ROWX, G_ROWS, G_KW, G_YPX, G_TILES, G_BIAS, G_LO, G_HI, G_LAST = 0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 76, 80
FIRST_C = 3  # input channels of the first-layer tiles (RGB)
# Widths of the run forms (first_fn run=True): ow_tile's choices in direct.cpp's
# param_space, each capped at a tile's widest (AVX2 6, 4, 7, 14; AVX-512 14, 6,
# 7, 28). Other widths run tile by tile; all of them would add 0.6 MB of code.
FIRST_RUN_W = {"avx2": (6, 4, 7, 14), "avx512": (14, 6, 7, 28)}


def first_fn(ocb, w, s, run=False):
    """A first layer in nhwc (3 channels, read in place): OCB output-channel
    blocks x W pixels. With dilation 1 the KW*3 floats a pixel reads from one
    input row are contiguous, so per kernel row one loop over the KW columns,
    3 channel steps each (weights [kh][kw][3][OCB][V]). Output pixels
    y_px_bytes apart (nhwc: OC floats), their OCB blocks adjacent.
    run: a run of t.tiles tiles along the row (the next tile's input W*S
    pixels further, its output W pixels), each a 3x3 kernel of 3 rows unrolled
    whole (27 channel steps). On one core (2 x 6, AVX2, output streamed) a
    tile per call with the kernel loops ran 108 GFLOP/s, the run in one call
    114, unrolled 118 against a probe of 129: the loops' and the call's scalar
    instructions take FMA ports, and 27 steps leave little to hide them in."""
    n, wreg, tmps = registers(ocb, w)
    px = s * FIRST_C * 4  # bytes between the input pixels of the tile
    a = []

    def emit(line):
        a.append(f'      "{line}\\n\\t"')

    if run:
        emit(f"mov {G_ROWX}(%[t]), %%rsi")
        emit(f"mov {G_X}(%[t]), %%r9")
        emit("mov (%%rsi), %%r15")  # kernel rows 0, 1, 2 at these byte offsets from x
        emit("mov 8(%%rsi), %%r10")
        emit("mov 16(%%rsi), %%r11")
        emit(f"mov {G_Y}(%[t]), %%rax")
        emit(f"mov {G_YPX}(%[t]), %%r12")
        emit(f"mov {G_TILES}(%[t]), %%rdi")
        emit(f"mov {G_LAST}(%[t]), %%rcx")
        emit(f"mov {G_BIAS}(%[t]), %%r14")
        emit(f"mov {G_W}(%[t]), %%r8")
        emit("1:")
    for k in range(n):
        emit(f"{'vpxord' if EMB else 'vxorps'} %%{R}{k}, %%{R}{k}, %%{R}{k}")
    if run:
        used_tmps = set()
        emit("lea (%%r9,%%r15,1), %%rsi")
        emit("lea (%%r9,%%r10,1), %%rdx")
        emit("lea (%%r9,%%r11,1), %%r13")
        for kh, base in enumerate(["rsi", "rdx", "r13"]):
            # Kernel row kh: steps kh*9 .. kh*9+8 (weights at r8 by step), its input at base.
            used_tmps |= fma_steps(emit, ocb, w, 3 * FIRST_C, px, wreg, tmps, first=kh * 3 * FIRST_C, x_reg=base,
                                   x_from=kh * 3 * FIRST_C)
    else:
        emit(f"mov {G_X}(%[t]), %%r9")
        emit(f"mov {G_W}(%[t]), %%r8")
        emit(f"mov {G_ROWX}(%[t]), %%rsi")
        emit(f"mov {G_ROWS}(%[t]), %%rdi")
        emit("2:")  # kernel rows
        emit("mov (%%rsi), %%rdx")
        emit("add %%r9, %%rdx")
        emit(f"mov {G_KW}(%[t]), %%rcx")
        emit("3:")  # kernel columns, 3 channels each
        used_tmps = fma_steps(emit, ocb, w, FIRST_C, px, wreg, tmps)
        emit(f"add ${FIRST_C * 4}, %%rdx")
        emit(f"add ${FIRST_C * ocb * VB}, %%r8")
        emit("dec %%rcx")
        emit("jnz 3b")
        emit("add $8, %%rsi")
        emit("dec %%rdi")
        emit("jnz 2b")
        emit(f"mov {G_LAST}(%[t]), %%rcx")
        emit(f"mov {G_BIAS}(%[t]), %%r14")
    add_bias(emit, ocb, w)
    clamp(emit, n, G_LO, G_HI)
    # Pixel by pixel (rdx), its blocks a vector apart: y_px is known only at run time.
    emit("mov %%rax, %%rdx" if run else f"mov {G_Y}(%[t]), %%rdx")
    if not run:
        emit(f"mov {G_YPX}(%[t]), %%r12")
    for i in range(w):
        for j in range(ocb):
            emit(f"vmovups %%{R}{j * w + i}, {j * VB}(%%rdx)")
        if i + 1 < w or run:
            emit("add %%r12, %%rdx")
    if run:
        emit("mov %%rdx, %%rax")
        emit(f"add ${w * px}, %%r9")
        emit("dec %%rdi")
        emit("jnz 1b")
    name = f"asm_first_{'run_' if run else ''}{ocb}x{w}_s{s}"
    return asm_function(name, "AsmFirstTile", a, set(range(n)) | set(wreg) | used_tmps,
                        ["rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"])


def main():
    """gen_direct_asm.py ISA OUTPUT: ISA avx512 or avx2."""
    isa, path = sys.argv[1], pathlib.Path(sys.argv[2])
    assert isa in ("avx512", "avx2"), isa
    set_isa(isa)
    tiles, tiles2, split = (TILES, TILES_2ROW, TILES_SPLIT) if isa == "avx512" else (TILES_AVX2, TILES_2ROW_AVX2,
                                                                                     TILES_SPLIT_AVX2)
    out = [
        "// Generated by src/routines/cpu/gen_direct_asm.py at build time: change the generator.",
        f"// {isa.upper().replace('AVX512', 'AVX-512')} register tiles of the float32 direct convolution (see conv_kernels.hpp, AsmTile).",
        f"// Included by conv_kernels.inl inside namespace softneuro::cpu::{isa}.",
        "",
    ]
    forms = (True, False) if W_PREFETCH_CHOICE else (True,)
    for pf in forms:
        for ocb, wmax in tiles:
            for s in STRIDES:
                for w in range(1, wmax + 1):
                    out.append(tile_fn(ocb, w, s, w_prefetch=pf))
        for ocb, wmax in tiles2:
            for s in STRIDES:
                for w in range(1, wmax + 1):
                    out.append(tile_fn(ocb, w, s, rows=2, w_prefetch=pf))
        for ocb, wmax, wmin in split:
            for s in STRIDES:
                for w in range(wmin, wmax + 1):
                    for j in range(1, w + 1):
                        out.append(tile_fn(ocb, w, s, w_prefetch=pf, split=j))
    for ocb, wmax in tiles:
        for s in STRIDES:
            for w in range(1, wmax + 1):
                out.append(first_fn(ocb, w, s))
            for w in sorted({min(w, wmax) for w in FIRST_RUN_W[isa]}):
                out.append(first_fn(ocb, w, s, run=True))
    out.append("void fill_asm_tiles(conv::Kernels& k) {")
    for ocb, wmax in tiles:
        oi = ocb_index(ocb)
        for si, s in enumerate(STRIDES):
            for w in range(1, wmax + 1):
                for pf in (1, 0):  # without the choice both entries take the prefetching tile
                    fn = tile_name(ocb, w, s, 1, pf or not W_PREFETCH_CHOICE)
                    out.append(f"  k.asm_tile[{pf}][{oi}][{si}][{w}] = &{fn};")
                out.append(f"  k.asm_first[{oi}][{si}][{w}] = &asm_first_{ocb}x{w}_s{s};")
            for w in sorted({min(w, wmax) for w in FIRST_RUN_W[isa]}):
                out.append(f"  k.asm_first_run[{oi}][{si}][{w}] = &asm_first_run_{ocb}x{w}_s{s};")
    for ocb, wmax in tiles2:
        for si, s in enumerate(STRIDES):
            for w in range(1, wmax + 1):
                for pf in (1, 0):
                    fn = tile_name(ocb, w, s, 2, pf or not W_PREFETCH_CHOICE)
                    out.append(f"  k.asm_tile2r[{pf}][{si}][{w}] = &{fn};")
        out.append(f"  k.asm2r_ocb = {ocb};")
    for ocb, wmax, wmin in split:
        assert wmax <= 6, "conv::kMaxSplitW"
        for si, s in enumerate(STRIDES):
            for w in range(wmin, wmax + 1):
                for j in range(1, w + 1):
                    for pf in (1, 0):
                        fn = tile_name(ocb, w, s, 1, pf or not W_PREFETCH_CHOICE, j)
                        out.append(f"  k.asm_tile_split[{pf}][{ocb_index(ocb)}][{si}][{w}][{j}] = &{fn};")
        out.append(f"  k.asm_split_max_w[{ocb_index(ocb)}] = {wmax};")
        out.append(f"  k.asm_split_min_w[{ocb_index(ocb)}] = {wmin};")
    out.append(f"  k.w_next_per_tap = {W_NEXT_PER_TAP};")
    for ocb, wmax in tiles:
        out.append(f"  k.asm_max_w[{ocb_index(ocb)}] = {wmax};")
    out.append(f"  k.w_prefetch_choice = {'true' if W_PREFETCH_CHOICE else 'false'};")
    out.append("}")
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "\n".join(out) + "\n"
    # Written only when it changes: a configure with another Python interpreter
    # (pip install . in a venv) reruns this, and an untouched file recompiles nothing.
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


if __name__ == "__main__":
    main()
