// The probe and value models, one contrib op each, written as ONNX protobuf
// bytes from JavaScript (no onnx package needed). Shapes are symbolic, so one
// model serves every batch size, sequence length and head size.

export function varint(n) {
  const out = [];
  let v = BigInt(n);
  if (v < 0n) v += 1n << 64n;
  do {
    let b = Number(v & 0x7fn);
    v >>= 7n;
    if (v) b |= 0x80;
    out.push(b);
  } while (v);
  return out;
}
const enc = new TextEncoder();
export function field(num, wire, payload) { return [...varint((num << 3) | wire), ...payload]; }
export function bytesField(num, data) { return field(num, 2, [...varint(data.length), ...data]); }
export function str(num, s) { return bytesField(num, [...enc.encode(s)]); }
export function int(num, v) { return field(num, 0, varint(v)); }

// AttributeProto: name=1, f=2, i=3, s=4, type=20 (FLOAT 1, INT 2, STRING 3).
function attr(name, value) {
  if (typeof value === "number" && !Number.isInteger(value)) {
    const b = new Uint8Array(new Float32Array([value]).buffer);
    return [...str(1, name), ...field(2, 5, [...b]), ...int(20, 1)];
  }
  if (typeof value === "string") return [...str(1, name), ...bytesField(4, [...enc.encode(value)]), ...int(20, 3)];
  return [...str(1, name), ...int(3, value), ...int(20, 2)];
}
// ValueInfoProto with a tensor type of elem_type (1 float, 6 int32) and dims
// (numbers are fixed, strings symbolic).
export function valueInfo(name, elem, dims) {
  const dimBytes = dims.flatMap((d) => bytesField(1, typeof d === "number" ? int(1, d) : str(2, d)));
  const tensor = [...int(1, elem), ...bytesField(2, dimBytes)];
  return [...str(1, name), ...bytesField(2, bytesField(1, tensor))];
}

// A model of one com.microsoft node. inputs/outputs: [name, elem, dims];
// nodeInputs may hold "" for an absent optional input.
export function oneNodeModel(op, attrs, inputs, outputs, nodeInputs) {
  const node = [
    ...(nodeInputs || inputs.map((i) => i[0])).flatMap((n) => str(1, n)),
    ...outputs.flatMap((o) => str(2, o[0])),
    ...str(3, op), ...str(4, op),
    ...Object.entries(attrs).flatMap(([k, v]) => bytesField(5, attr(k, v))),
    ...str(7, "com.microsoft"),
  ];
  const graph = [
    ...bytesField(1, node), ...str(2, op.toLowerCase()),
    ...inputs.flatMap((i) => bytesField(11, valueInfo(...i))),
    ...outputs.flatMap((o) => bytesField(12, valueInfo(...o))),
  ];
  const model = [
    ...int(1, 8), ...str(2, "kvspec"),
    ...bytesField(8, [...str(1, ""), ...int(2, 17)]),
    ...bytesField(8, [...str(1, "com.microsoft"), ...int(2, 1)]),
    ...bytesField(7, graph),
  ];
  return Uint8Array.from(model);
}

const F = 1, I32 = 6;

// GroupQueryAttention: query [B,S,Hq*D], key/value [B,S,H*D], past [B,H,P,D],
// seqlens_k [B], total_sequence_length [1]; outputs output, present_key/value.
export function gqaModel({ qheads, heads, window, ring, scale }) {
  const attrs = { num_heads: qheads, kv_num_heads: heads };
  if (scale) attrs.scale = scale;
  if (window) attrs.local_window_size = window;
  if (ring) attrs.sliding_window_cache = 1;
  return oneNodeModel("GroupQueryAttention", attrs, [
    ["query", F, ["B", "S", "Q"]], ["key", F, ["B", "S", "K"]], ["value", F, ["B", "S", "K"]],
    ["past_key", F, ["B", heads, "P", "D"]], ["past_value", F, ["B", heads, "P", "D"]],
    ["seqlens_k", I32, ["B"]], ["total_sequence_length", I32, [1]],
  ], [
    ["output", F, ["B", "S", "Q"]],
    ["present_key", F, ["B", heads, "T", "D"]], ["present_value", F, ["B", heads, "T", "D"]],
  ]);
}

// CausalConvWithState (silu): input [B,C,L], weight [C,1,K], past_state [B,C,K-1].
export function convModel() {
  return oneNodeModel("CausalConvWithState", { activation: "silu" }, [
    ["input", F, ["B", "C", "L"]], ["weight", F, ["C", 1, "K"]], ["past_state", F, ["B", "C", "P"]],
  ], [["output", F, ["B", "C", "L"]], ["present_state", F, ["B", "C", "P"]]],
  ["input", "weight", "", "past_state"]);
}

// LinearAttention (gated_delta): q [B,T,Hk*dk], k [B,T,Hk*dk], v [B,T,Hv*dv],
// past_state [B,Hv,dk,dv], decay (log gate) [B,T,Hv], beta [B,T,Hv].
export function linearAttentionModel({ kheads, heads }) {
  return oneNodeModel("LinearAttention", { q_num_heads: kheads, kv_num_heads: heads, update_rule: "gated_delta" }, [
    ["query", F, ["B", "T", "QK"]], ["key", F, ["B", "T", "QK"]], ["value", F, ["B", "T", "V"]],
    ["past_state", F, ["B", heads, "DK", "DV"]], ["decay", F, ["B", "T", heads]], ["beta", F, ["B", "T", heads]],
  ], [["output", F, ["B", "T", "V"]], ["present_state", F, ["B", heads, "DK", "DV"]]]);
}
