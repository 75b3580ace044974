"""Triton kernels of the GPU-bound reference MoE (``fp4moe.reference.grouped_moe``): FP4/e8m0 decode in
registers, grouped (expert-sorted) GEMMs, the SwiGLU epilogue.

Formats (OCP Microscaling Formats v1.0): E2M1 codes (section 5.3.3; element 2i in the low
nibble, as ``fp4moe.mx.mxfp4`` packs them) and E8M0 block scales (section 5.4.1; one per 32
elements along K). The decode is exact: every E2M1 value times a power of two is a bfloat16
(2 significant bits), so the tensor cores multiply exactly the numbers ``fp4moe.mx.mxfp4.dequantize``
returns and accumulate in float32, as the exact reference's float32 matmuls do (only the
summation order differs).

Decode without a table: for the magnitude code ``m3 = c & 7`` the bfloat16 bit pattern of
``m3``'s value is ``(m3 << 6) + 0x3F00`` for ``m3 >= 2`` (1.0 .. 6.0), ``0x3F00`` (0.5) for
``m3 == 1`` and 0 for ``m3 == 0``; the scale 2^(s-127) is added to the exponent field
(``(s - 127) << 7``), which is exact while the exponent stays normal, i.e. for scale bytes
2..252 (``fp4moe.reference.grouped_moe.FAST_SCALE_RANGE``). A layer with any scale byte outside that range (tiny, huge,
or 0xFF = NaN) is run with ``EXACT_SCALE``: decode to bfloat16, multiply by the float32 scale
(NaN propagates like the reference), round to bfloat16 (exact for every finite product).

Imported only where Triton and a CUDA GPU are present (``fp4moe.reference.grouped_moe.fast_path_available``).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _e2m1_bits(c, sexp):
    """int32 E2M1 codes (0..15) -> int32 bfloat16 bit patterns of code * 2^(sexp >> 7)."""
    m3 = c & 7
    base = tl.where(m3 >= 2, m3 << 6, 0) + (0x3F00 + sexp)
    mag = tl.where(m3 == 0, 0, base)
    return mag | ((c & 8) << 12)


@triton.jit
def _as_bf16(bits):
    return bits.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def _mma(a, b, acc, UPCAST: tl.constexpr):
    """acc + a @ b.T. ``UPCAST`` (CPU checks under TRITON_INTERPRET=1 only, whose interpreter
    multiplies bfloat16 as its uint16 storage) multiplies the same values in float32."""
    if UPCAST:
        return tl.dot(a.to(tl.float32), tl.trans(b).to(tl.float32), acc)
    return tl.dot(a, tl.trans(b), acc)


@triton.jit
def _to_bf16(v, UPCAST: tl.constexpr):
    """float32 -> bfloat16, round to nearest even. Under the interpreter (``UPCAST``), whose
    casts truncate, the same rounding is done on the bits (finite values)."""
    if UPCAST:
        bits = v.to(tl.int32, bitcast=True)
        return _as_bf16((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16)
    return v.to(tl.bfloat16, fp_downcast_rounding="rtne")


@triton.jit
def _e8m0_f32(s):
    """int32 e8m0 bytes -> float32 2^(s-127): 0x00 is the subnormal 2^-127, 0xFF is NaN."""
    bits = tl.where(s == 0, 0x00400000, tl.where(s == 255, 0x7FC00000, s << 23))
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _decode(b, s, EXACT_SCALE: tl.constexpr, UPCAST: tl.constexpr):
    """Packed bytes b and their scale bytes s (int32, same shape) -> (low, high) bfloat16."""
    if EXACT_SCALE:
        f = _e8m0_f32(s)
        lo = _to_bf16(_as_bf16(_e2m1_bits(b & 15, 0)).to(tl.float32) * f, UPCAST)
        hi = _to_bf16(_as_bf16(_e2m1_bits(b >> 4, 0)).to(tl.float32) * f, UPCAST)
    else:
        sexp = (s - 127) << 7
        lo = _as_bf16(_e2m1_bits(b & 15, sexp))
        hi = _as_bf16(_e2m1_bits(b >> 4, sexp))
    return lo, hi


@triton.jit
def _block_scales(s_rows, kb0, wmask_rows, kmask_blocks, BN: tl.constexpr, BKH: tl.constexpr):
    """The scale bytes of a [BN, BKH] tile of packed bytes starting at byte column kb0: one
    load per 32-element block ([BN, BKH / 16]), repeated over its 16 bytes in registers."""
    kblk = kb0 // 16 + tl.arange(0, BKH // 16)
    s = tl.load(s_rows + kblk[None, :], mask=wmask_rows[:, None] & kmask_blocks[None, :], other=127).to(tl.int32)
    return tl.reshape(tl.broadcast_to(s[:, :, None], (BN, BKH // 16, 16)), (BN, BKH))


@triton.jit
def decode_rows_kernel(
    w_ptr, s_ptr, out_ptr,
    rows_per_expert, rows_half, used_rows, used_bytes,
    stride_w, stride_s, stride_o,
    BLOCK: tl.constexpr, EXACT_SCALE: tl.constexpr, UPCAST: tl.constexpr,
):
    """Decode the used region of [E * rows_per_expert, K/2] packed rows into bfloat16 [.., K].
    A row is used when (row within its expert) % rows_half < used_rows (gate and up halves of
    w13 each keep their first ``used_rows``; w2 keeps its first ``used_rows`` of H)."""
    r = tl.program_id(0)
    if (r % rows_per_expert) % rows_half >= used_rows:
        return
    j = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = j < used_bytes
    b = tl.load(w_ptr + r * stride_w + j, mask=m, other=0).to(tl.int32)
    s = tl.load(s_ptr + r * stride_s + j // 16, mask=m, other=127).to(tl.int32)
    lo, hi = _decode(b, s, EXACT_SCALE, UPCAST)
    tl.store(out_ptr + r * stride_o + 2 * j, lo, mask=m)
    tl.store(out_ptr + r * stride_o + 2 * j + 1, hi, mask=m)


@triton.jit
def _tile(tile_start_ptr, row_start_ptr, G, NUM_G: tl.constexpr, BM: tl.constexpr):
    """(group, first sorted row, end row, valid) of this program's M tile."""
    pid_m = tl.program_id(0)
    gidx = tl.arange(0, NUM_G)
    ts = tl.load(tile_start_ptr + gidx, mask=gidx <= G, other=2**30)
    g = tl.sum((ts <= pid_m).to(tl.int32), axis=0) - 1
    gc = tl.minimum(g, G - 1)
    t0 = tl.sum(tl.where(gidx == gc, ts, 0), axis=0)
    r0 = tl.load(row_start_ptr + gc)
    r1 = tl.load(row_start_ptr + gc + 1)
    return g, r0 + (pid_m - t0) * BM, r1


@triton.jit
def stage1_kernel(
    x_ptr, w_ptr, s_ptr, order_ptr, row_start_ptr, tile_start_ptr, topw_ptr, a_ptr,
    n_used, k_used, k_chunk, P, top_k, G, limit,
    stride_xt, stride_we, stride_wn, stride_se, stride_sn, stride_a, stride_split,
    NUM_G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, SPLIT: tl.constexpr,
    HAS_LIMIT: tl.constexpr, DOWEIGHT: tl.constexpr, PREDECODED: tl.constexpr, EXACT_SCALE: tl.constexpr, UPCAST: tl.constexpr,
):
    """a[r, n] = silu(gate) * up for the sorted rows r of one expert group, n < n_used.
    Group 0 holds the rows routed to experts of other ranks: nothing to compute.
    ``SPLIT``: program axis 2 reduces K in chunks of ``k_chunk`` and stores the float32 partial
    gate/up sums ([split, rows, 2 * n_used] at ``a_ptr``) for ``swiglu_kernel`` (small batches:
    more programs in flight than one per (tile, n block))."""
    g, row0, row_end = _tile(tile_start_ptr, row_start_ptr, G, NUM_G, BM)
    if (g >= G) | (g == 0):
        return
    e = g - 1
    rows = row0 + tl.arange(0, BM)
    rmask = rows < row_end
    pos = tl.load(order_ptr + rows, mask=rmask, other=0)
    tok = pos // top_k
    n = tl.program_id(1) * BN + tl.arange(0, BN)
    nmask = n < n_used
    acc_g = tl.zeros((BM, BN), dtype=tl.float32)
    acc_u = tl.zeros((BM, BN), dtype=tl.float32)
    x_row = x_ptr + tok[:, None] * stride_xt
    wg_row = w_ptr + e * stride_we + n[:, None] * stride_wn
    wu_row = w_ptr + e * stride_we + (P + n)[:, None] * stride_wn
    k_lo = tl.program_id(2) * k_chunk
    k_hi = tl.minimum(k_lo + k_chunk, k_used)
    if PREDECODED:
        for k0 in range(k_lo, k_hi, BK):
            kk = k0 + tl.arange(0, BK)
            km = kk < k_hi
            xt = tl.load(x_row + kk[None, :], mask=rmask[:, None] & km[None, :], other=0.0)
            wg = tl.load(wg_row + kk[None, :], mask=nmask[:, None] & km[None, :], other=0.0)
            wu = tl.load(wu_row + kk[None, :], mask=nmask[:, None] & km[None, :], other=0.0)
            acc_g = _mma(xt, wg, acc_g, UPCAST)
            acc_u = _mma(xt, wu, acc_u, UPCAST)
    else:
        sg_row = s_ptr + e * stride_se + n[:, None] * stride_sn
        su_row = s_ptr + e * stride_se + (P + n)[:, None] * stride_sn
        for k0 in range(k_lo, k_hi, BK):
            kb = k0 // 2 + tl.arange(0, BK // 2)  # packed byte columns
            km = kb < k_hi // 2
            xm = rmask[:, None] & km[None, :]
            wm = nmask[:, None] & km[None, :]
            xe = tl.load(x_row + 2 * kb[None, :], mask=xm, other=0.0)
            xo = tl.load(x_row + 2 * kb[None, :] + 1, mask=xm, other=0.0)
            bg = tl.load(wg_row + kb[None, :], mask=wm, other=0).to(tl.int32)
            bu = tl.load(wu_row + kb[None, :], mask=wm, other=0).to(tl.int32)
            kbm = (k0 // 32 + tl.arange(0, BK // 32)) < k_hi // 32
            sg = _block_scales(sg_row, k0 // 2, nmask, kbm, BN, BK // 2)
            su = _block_scales(su_row, k0 // 2, nmask, kbm, BN, BK // 2)
            glo, ghi = _decode(bg, sg, EXACT_SCALE, UPCAST)
            ulo, uhi = _decode(bu, su, EXACT_SCALE, UPCAST)
            acc_g = _mma(xe, glo, acc_g, UPCAST)
            acc_g = _mma(xo, ghi, acc_g, UPCAST)
            acc_u = _mma(xe, ulo, acc_u, UPCAST)
            acc_u = _mma(xo, uhi, acc_u, UPCAST)
    omask = rmask[:, None] & nmask[None, :]
    if SPLIT:
        part = a_ptr + tl.program_id(2) * stride_split + rows[:, None] * stride_a + n[None, :]
        tl.store(part, acc_g, mask=omask)
        tl.store(part + n_used, acc_u, mask=omask)
    else:
        tw = tl.load(topw_ptr + pos, mask=rmask, other=0.0)
        a = _swiglu(acc_g, acc_u, tw[:, None], limit, HAS_LIMIT, DOWEIGHT)
        tl.store(a_ptr + rows[:, None] * stride_a + n[None, :], _to_bf16(a, UPCAST), mask=omask)


@triton.jit
def _swiglu(g, u, tw, limit, HAS_LIMIT: tl.constexpr, DOWEIGHT: tl.constexpr):
    if DOWEIGHT:  # aiter's torch_moe_stage1: the GEMM output times the top-k weight, before act
        g = g * tw
        u = u * tw
    if HAS_LIMIT:
        g = tl.minimum(g, limit, propagate_nan=tl.PropagateNan.ALL)
        u = tl.minimum(tl.maximum(u, -limit, propagate_nan=tl.PropagateNan.ALL), limit, propagate_nan=tl.PropagateNan.ALL)
    return g / (1.0 + tl.exp(-g)) * u


@triton.jit
def swiglu_kernel(
    part_ptr, order_ptr, row_start_ptr, topw_ptr, a_ptr,
    n_used, splits, limit, stride_split, stride_p, stride_a,
    BLOCK: tl.constexpr, HAS_LIMIT: tl.constexpr, DOWEIGHT: tl.constexpr, UPCAST: tl.constexpr,
):
    """The stage-1 epilogue after a split-K stage 1: sum the partials (in split order), then
    as ``stage1_kernel``. Rows of group 0 (other ranks) get zeros."""
    r = tl.program_id(0)
    n = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    m = n < n_used
    local = r >= tl.load(row_start_ptr + 1)
    g = tl.zeros((BLOCK,), dtype=tl.float32)
    u = tl.zeros((BLOCK,), dtype=tl.float32)
    for sidx in range(0, splits):
        base = part_ptr + sidx * stride_split + r * stride_p
        g += tl.load(base + n, mask=m & local, other=0.0)
        u += tl.load(base + n_used + n, mask=m & local, other=0.0)
    tw = tl.load(topw_ptr + tl.load(order_ptr + r))
    a = _swiglu(g, u, tw, limit, HAS_LIMIT, DOWEIGHT)
    tl.store(a_ptr + r * stride_a + n, _to_bf16(a, UPCAST), mask=m)


@triton.jit
def stage2_kernel(
    a_ptr, w_ptr, s_ptr, order_ptr, row_start_ptr, tile_start_ptr, topw_ptr, y_ptr,
    k_used, h_used, H, G,
    stride_a, stride_we, stride_wn, stride_se, stride_sn, stride_y,
    NUM_G: tl.constexpr, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
    DOWEIGHT: tl.constexpr, PREDECODED: tl.constexpr, EXACT_SCALE: tl.constexpr, UPCAST: tl.constexpr,
):
    """y[pos(r), h] = (a[r, :k_used] @ W2[e, h, :k_used]) (* top-k weight), written at the
    row's original (token, slot) position; zeros for other ranks' rows and for h >= h_used."""
    g, row0, row_end = _tile(tile_start_ptr, row_start_ptr, G, NUM_G, BM)
    if g >= G:
        return
    active = g > 0
    e = tl.maximum(g - 1, 0)
    rows = row0 + tl.arange(0, BM)
    rmask = rows < row_end
    pos = tl.load(order_ptr + rows, mask=rmask, other=0)
    h = tl.program_id(1) * BN + tl.arange(0, BN)
    hmask = (h < h_used) & active
    lmask = rmask & active
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    a_row = a_ptr + rows[:, None] * stride_a
    w_row = w_ptr + e * stride_we + h[:, None] * stride_wn
    if PREDECODED:
        for k0 in range(0, k_used, BK):
            kk = k0 + tl.arange(0, BK)
            km = kk < k_used
            at = tl.load(a_row + kk[None, :], mask=lmask[:, None] & km[None, :], other=0.0)
            wt = tl.load(w_row + kk[None, :], mask=hmask[:, None] & km[None, :], other=0.0)
            acc = _mma(at, wt, acc, UPCAST)
    else:
        s_row = s_ptr + e * stride_se + h[:, None] * stride_sn
        for k0 in range(0, k_used, BK):
            kb = k0 // 2 + tl.arange(0, BK // 2)
            km = kb < k_used // 2
            am = lmask[:, None] & km[None, :]
            wm = hmask[:, None] & km[None, :]
            ae = tl.load(a_row + 2 * kb[None, :], mask=am, other=0.0)
            ao = tl.load(a_row + 2 * kb[None, :] + 1, mask=am, other=0.0)
            b = tl.load(w_row + kb[None, :], mask=wm, other=0).to(tl.int32)
            s = _block_scales(s_row, k0 // 2, hmask, (k0 // 32 + tl.arange(0, BK // 32)) < k_used // 32, BN, BK // 2)
            lo, hi = _decode(b, s, EXACT_SCALE, UPCAST)
            acc = _mma(ae, lo, acc, UPCAST)
            acc = _mma(ao, hi, acc, UPCAST)
    if not DOWEIGHT:
        tw = tl.load(topw_ptr + pos, mask=rmask, other=0.0)
        acc = acc * tw[:, None]
    tl.store(y_ptr + pos[:, None] * stride_y + h[None, :], acc, mask=rmask[:, None] & (h < H)[None, :])


@triton.jit
def route_kernel(ids_ptr, order_ptr, row_start_ptr, tile_start_ptr, R, G, BM, R_P2: tl.constexpr, G_P2: tl.constexpr):
    """The routing of ``fp4moe.reference.grouped_moe.group_by_expert`` in one program (small batches): a
    stable counting sort of the R (token, slot) rows by group (local expert id + 1, 0 = other
    ranks), the groups' first rows and first M tiles. One launch instead of ~10 torch ops."""
    i = tl.arange(0, R_P2)
    valid = i < R
    grp = tl.load(ids_ptr + i, mask=valid, other=0) + 1
    g = tl.arange(0, G_P2)
    onehot = ((grp[None, :] == g[:, None]) & valid[None, :]).to(tl.int32)  # [G_P2, R_P2]
    counts = tl.sum(onehot, axis=1)
    starts = tl.cumsum(counts, 0) - counts
    tiles = (counts + BM - 1) // BM
    tile_start = tl.cumsum(tiles, 0) - tiles
    tl.store(row_start_ptr + g, starts, mask=g <= G)
    tl.store(tile_start_ptr + g, tile_start, mask=g <= G)
    rank = tl.sum(onehot * (tl.cumsum(onehot, 1) - 1), axis=0)  # earlier rows of the same group
    pos = tl.sum(onehot * starts[:, None], axis=0) + rank
    tl.store(order_ptr + pos, i, mask=valid)
