"""kvspec._core: layouts and numpy forwards, refusals, codec, kernels, trace."""
import glob
import os

import numpy as np
import pytest

import kvspec
from kvspec import values
from conftest import SOURCE_DIR, load_under_one_gib, sparse_file


def kv(name="a", **kw):
    return kvspec.LayerConfig(name, "kv", **kw)


def inputs(layout, columns, seed=0):
    rng = np.random.default_rng(seed)
    io = []
    for i in range(len(layout)):
        c = layout.config(i)
        shape = (layout.rows, columns, c.heads, c.dim)
        io.append(tuple(rng.standard_normal(shape).astype(np.float32) for _ in range(3)))
    return io


def test_module_is_compiled():
    assert kvspec.HAVE_CORE
    assert issubclass(kvspec.Refused, RuntimeError)


def test_forward_matches_numpy_attention():
    layout = kvspec.Layout(1, [kv(heads=2, dim=8)])
    io = inputs(layout, 5)
    (out,) = layout.forward(5, io)
    assert out.shape == (1, 5, 2, 8) and out.dtype == np.float32
    q, k, v = io[0]
    for t in range(5):
        for h in range(2):
            s = k[0, :t + 1, h] @ q[0, t, h] / np.sqrt(8)
            w = np.exp(s - s.max())
            want = (w / w.sum()) @ v[0, :t + 1, h]
            np.testing.assert_allclose(out[0, t, h], want, rtol=1e-5, atol=1e-5)
    assert layout.positions() == [5]
    assert layout.kind(0) == "kv" and layout.trimmable(0)
    assert layout.bytes_per_token(0) == 2 * 8 * 2 * 4


@pytest.mark.parametrize("kv,row_bytes", [("f32", 256), ("bf16", 128), ("q8_0", 68),
                                          ("q4_0", 36)])
def test_storage_types_store_what_values_stored_reads_back(kv, row_bytes):
    """Keys and values are kept as kvspec.values.stored gives them (the numpy
    definition of TRACE.md's rounding), and attention reads them: the
    output is numpy attention over the stored values."""
    layout = kvspec.Layout(1, [kvspec.LayerConfig("a", "kv", heads=2, dim=64, kv=kv)])
    assert layout.bytes_per_token(0) == 2 * 2 * row_bytes
    io = inputs(layout, 4)
    (out,) = layout.forward(4, io)
    q, k, v = io[0]
    view = layout.kv_view(0)
    assert view["type"] == kv
    ks = values.stored(kv, k[0].reshape(-1), 64).reshape(4, 2, 64)
    vs = values.stored(kv, v[0].reshape(-1), 64).reshape(4, 2, 64)
    for t in range(4):
        slot = list(view["slot_pos"][0]).index(t)
        np.testing.assert_array_equal(view["k"][0, :, slot], ks[t])
        np.testing.assert_array_equal(view["v"][0, :, slot], vs[t])
        for h in range(2):
            s = ks[:t + 1, h] @ q[0, t, h] / np.sqrt(64)
            w = np.exp(s - s.max())
            np.testing.assert_allclose(out[0, t, h], (w / w.sum()) @ vs[:t + 1, h],
                                       rtol=1e-5, atol=1e-5)
    if kv != "f32":  # the rounding is visible: the stored keys are not the written ones
        assert not np.array_equal(ks, k[0])


def test_forward_writes_callers_out_in_place_and_converts_other_inputs():
    layout = kvspec.Layout(1, [kv()])
    q, k, v = inputs(layout, 3)[0]
    out = np.full((1, 3, 1, 4), 7.0, np.float32)
    (got,) = layout.forward(3, [(q.astype(np.float64), k, v[:, :, :, :])], out=[out])
    assert got is out or np.shares_memory(got, out)
    assert not np.all(out == 7.0)
    # Non-contiguous inputs are converted, with the same result.
    other = kvspec.Layout(1, [kv()])
    big = np.zeros((1, 3, 1, 8), np.float32)
    big[..., ::2] = q
    (again,) = other.forward(3, [(big[..., ::2], k, v)])
    np.testing.assert_array_equal(again, out)


def test_shape_errors_are_value_errors_and_change_nothing():
    layout = kvspec.Layout(1, [kv()])
    h = layout.state_hash()
    with pytest.raises(ValueError):
        layout.forward(2, [tuple(np.zeros(3, np.float32) for _ in range(3))])
    assert layout.state_hash() == h


def refusal_leaves_state(layout, fn):
    before = layout.state_hash()
    with pytest.raises(kvspec.Refused) as e:
        fn()
    assert str(e.value)
    assert layout.state_hash() == before
    return str(e.value)


def test_refusals_carry_the_message_and_leave_state_unchanged():
    layout = kvspec.Layout(2, [kv(), kvspec.LayerConfig("s", "rotating", window=2)])
    layout.forward(3, inputs(layout, 3))
    assert "holds only" in refusal_leaves_state(layout, lambda: layout.trim(5))
    assert layout.kind(1) == "batched_rotating" and not layout.trimmable(1)
    refusal_leaves_state(layout, lambda: layout.trim(1))  # a wrapped ring
    refusal_leaves_state(layout, lambda: layout.accept([1]))  # nothing armed
    refusal_leaves_state(layout, lambda: layout.filter([1, 0]))
    refusal_leaves_state(layout, lambda: layout.forward(2, inputs(layout, 2), left=[1, 0]))
    layout.arm()
    refusal_leaves_state(layout, layout.arm)
    refusal_leaves_state(layout, lambda: layout.extract(0))
    layout.forward(2, inputs(layout, 2))
    refusal_leaves_state(layout, lambda: layout.forward(1, inputs(layout, 1)))
    layout.accept([1, 2])
    assert layout.positions() == [4, 5]
    with pytest.raises(kvspec.Refused):
        kvspec.Layout(1, [kvspec.LayerConfig("s", "rotating", window=0)])


def test_lifecycle_trim_bypass_copy():
    layout = kvspec.Layout(2, [kv()])
    layout.forward(4, inputs(layout, 4))
    copy = layout.copy()
    layout.trim(2, bypass=True)
    assert layout.positions() == [2, 2] and copy.positions() == [4, 4]
    refusal_leaves_state(layout, lambda: layout.trim(1, bypass=True))
    one = copy.extract(1)
    assert one.rows == 1 and one.kind(0) == "kv"
    copy.filter([1])
    assert copy.rows == 1 and copy.kind(0) == "batched_kv"
    assert copy.difference(one) == ""
    copy.join(one)
    assert copy.rows == 2
    mask = layout.last_mask(0)
    assert mask is None or mask["admits"].dtype == bool


def test_last_mask_and_view():
    layout = kvspec.Layout(1, [kvspec.LayerConfig("s", "rotating", window=2, capacity=3)])
    layout.forward(2, inputs(layout, 2))
    mask = layout.last_mask(0)
    assert mask is not None
    assert mask["window"] == 2 and mask["admits"].shape[:2] == (1, 2)
    assert mask["admits"][0, 1].sum() == 2
    view = layout.kv_view(0)
    assert view["k"].shape[0] == 1 and sorted(view["slot_pos"][0][:2]) == [0, 1]
    assert layout.logical_slots(0, 0) == [0, 1]


def test_codec_round_trip():
    layout = kvspec.Layout(2, [kv(), kvspec.LayerConfig("s", "rotating", window=3),
                               kvspec.LayerConfig("r", "ssm", heads=2, kheads=1)])
    io = inputs(layout, 4)
    c = layout.config(2)
    C = c.ssm_channels()
    rng = np.random.default_rng(3)
    io[2] = (rng.standard_normal((c.conv, C)).astype(np.float32) * 0.5,
             rng.standard_normal((2, 4, C)).astype(np.float32),
             np.full((2, 4, 2), 0.9, np.float32), np.full((2, 4, 2), 0.5, np.float32))
    outs = layout.forward(4, io, right=[1, 0])
    assert outs[2].shape == (2, 4, 2, c.dv)
    data = kvspec.encode_layout(layout)
    back = kvspec.decode_layout(data)
    assert back.state_hash() == layout.state_hash()
    assert back.difference(layout) == ""
    np.testing.assert_array_equal(back.recurrent_state(2, 1), layout.recurrent_state(2, 1))
    with pytest.raises(kvspec.Refused):
        kvspec.decode_layout(data[:-3])
    with pytest.raises(kvspec.Refused):
        kvspec.decode_layout(b"garbage")


def test_attend_matches_reference_and_numpy():
    rng = np.random.default_rng(1)
    rows, heads, qheads, slots, dim, queries = 2, 2, 4, 7, 8, 3
    q = rng.standard_normal((rows, queries, qheads, dim)).astype(np.float32)
    k = rng.standard_normal((rows, heads, slots, dim)).astype(np.float32)
    v = rng.standard_normal((rows, heads, slots, dim)).astype(np.float32)
    slot_pos = np.tile(np.arange(slots, dtype=np.int32), (rows, 1))
    slot_pos[1, 2] = -1
    lo = np.zeros((rows, queries), np.int32)
    hi = np.tile(np.array([4, 5, 6], np.int32), (rows, 1))
    got = kvspec.attend(q, qheads, k, v, slot_pos, lo, hi)
    ref = kvspec.attend(q, qheads, k, v, slot_pos, lo, hi, reference=True)
    tol = kvspec.ATTENTION_TOLERANCE
    assert np.all(np.abs(got - ref) <= tol * (1 + np.abs(ref)))
    for r in range(rows):
        for t in range(queries):
            for hq in range(qheads):
                h = hq // (qheads // heads)
                keep = (slot_pos[r] >= lo[r, t]) & (slot_pos[r] <= hi[r, t])
                s = k[r, h, keep] @ q[r, t, hq] / np.sqrt(dim)
                w = np.exp(s - s.max())
                np.testing.assert_allclose(ref[r, t, hq], (w / w.sum()) @ v[r, h, keep],
                                           rtol=1e-5, atol=1e-5)


def test_conv_and_gated_delta_match_reference():
    rng = np.random.default_rng(2)
    K, C = 4, 12
    w = rng.standard_normal((K, C)).astype(np.float32)
    state = rng.standard_normal((K - 1, C)).astype(np.float32)
    x = rng.standard_normal(C).astype(np.float32)
    u, nxt = kvspec.conv_step(w, state, x)
    u_ref, nxt_ref = kvspec.conv_step(w, state, x, reference=True)
    assert np.all(np.abs(u - u_ref) <= kvspec.CONV_TOLERANCE * (1 + np.abs(u_ref)))
    np.testing.assert_array_equal(nxt, nxt_ref)
    window = np.concatenate([state, x[None]])
    z = (w * window).sum(axis=0)
    np.testing.assert_allclose(u_ref, z / (1 + np.exp(-z)), rtol=1e-5, atol=1e-5)
    hk, hv, dk, dv = 1, 2, 4, 3
    qn, kn = kvspec.prepare_query_key(rng.standard_normal(hk * dk).astype(np.float32),
                                      rng.standard_normal(hk * dk).astype(np.float32), hk, dk)
    np.testing.assert_allclose(np.linalg.norm(kn), 1, rtol=1e-5)
    S = rng.standard_normal((hv, dv, dk)).astype(np.float32)
    vv = rng.standard_normal(hv * dv).astype(np.float32)
    g = np.array([0.9, 0.8], np.float32)
    beta = np.array([0.5, 0.3], np.float32)
    S1, y = kvspec.gated_delta_step(S, qn, kn, vv, g, beta, hk)
    S1r, yr = kvspec.gated_delta_step(S, qn, kn, vv, g, beta, hk, reference=True)
    tol = kvspec.GATED_DELTA_TOLERANCE
    assert np.all(np.abs(y - yr) <= tol * (1 + np.abs(yr)))
    for h in range(hv):
        Sh = g[h] * S[h].astype(np.float64)
        m = Sh @ kn[0]
        Sh = Sh + beta[h] * np.outer(vv[h * dv:(h + 1) * dv] - m, kn[0])
        np.testing.assert_allclose(S1r[h], Sh, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(yr[h], Sh @ qn[0], rtol=1e-5, atol=1e-5)


def test_parse_trace_uses_the_library_parser():
    text = open(os.path.join(SOURCE_DIR, "corpus/traces/kv_decode.trace")).read()
    prog = kvspec.parse_trace(text, "kv_decode.trace")
    assert prog.rows == 1 and prog.layers[0].name == "a" and prog.layers[0].kind == "kv"
    first = prog.statements[0]
    assert first.op == "decode" and first.line == 8 and first.ids is None
    assert prog.statements[1].op == "expect sees" and prog.statements[1].items == [[0, 0]]
    with pytest.raises(kvspec.TraceSyntaxError) as e:
        kvspec.parse_trace("trace 1\nrows 65\nlayer a kv\n", "bad.trace")
    assert str(e.value).startswith("bad.trace:2:")
    nested = kvspec.parse_trace("trace 1\nrows 1\nlayer a kv\nexpect error trim 3\n")
    assert nested.statements[0].inner.op == "trim" and nested.statements[0].inner.count == 3


def test_run_trace():
    path = os.path.join(SOURCE_DIR, "corpus/traces/kv_decode.trace")
    status, out, err = kvspec.run_trace(open(path).read(), "kv_decode.trace")
    assert status == 0 and out.startswith("sees a r0 p0: 0") and err == ""
    status, out, err = kvspec.run_trace("trace 1\nrows 1\nlayer a kv\ntrim 1\n", "t")
    assert status == 1 and err.startswith("t:4: error:")


def test_values_generator_matches_the_library():
    # The pure-Python contents (kvspec.values) against the C++ runner's:
    # a kv layer fed token (0, 7, 0) through run_trace --values prints o,
    # which for one visible token equals v.
    status, out, _ = kvspec.run_trace("trace 1\nrows 1\nlayer a kv dim=4\nwindow 1 ids=7\n",
                                      "t", values=True)
    assert status == 0
    printed = [float(x) for x in out.split("out a r0 p0:")[1].split()]
    _, _, v = values.attention_token(0, 7, 0, 1, 1, 4)
    np.testing.assert_allclose(printed, v, rtol=1e-7)


def test_every_corpus_trace_parses():
    files = glob.glob(os.path.join(SOURCE_DIR, "corpus/traces/*.trace")) + \
        glob.glob(os.path.join(SOURCE_DIR, "corpus/traces/conformance/*.trace"))
    assert len(files) > 50
    for f in files:
        assert kvspec.parse_trace(open(f, newline="").read(), f).statements


def test_trace_files_over_the_parsers_cap_are_refused_without_being_held(tmp_path):
    # The cap is the parser's own (trace::kMaxTraceBytes): one byte over it
    # in memory is refused by the parser, an 8 GiB file by load() after
    # reading no further than the cap.
    cap = kvspec.MAX_TRACE_BYTES
    assert cap == 4 << 20
    with pytest.raises(kvspec.TraceSyntaxError, match="input too large"):
        kvspec.program.parse_trace("#" * (cap + 1))
    path = sparse_file(tmp_path / "big.trace")
    assert load_under_one_gib(path, dict(os.environ)) == "%s:1:1: file larger than 4 MiB\n" % path
