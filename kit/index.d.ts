// Types of kvspec-adapter-kit (docs/adapter-protocol.md).

/** The protocol version this kit speaks. */
export declare const PROTOCOL: 1;

/** The cache refuses the operation; the layout must be unchanged. */
export declare class Refused extends Error {
  constructor(message: string);
}

/** The engine cannot express this statement; the message is the reason. */
export declare class NotApplicable extends Error {
  constructor(reason: string);
}

/** One layer line of the trace header. */
export interface Layer {
  name: string;
  kind: "kv" | "rotating" | "ssm";
  /** storage type of an attention layer's keys and values */
  kv: "f32" | "bf16" | "q8_0" | "q4_0";
  line: number;
  heads: number;
  qheads: number;
  dim: number;
  /** 0: no window */
  window: number;
  capacity: number;
  kheads: number;
  dk: number;
  dv: number;
  conv: number;
}

/** A stored token as [pos, id], or a slot holding no written token. */
export type SeenItem = [number, number] | "pad" | "zero" | "junk";

export interface Seen {
  layer: number;
  row: number;
  pos: number;
  items: Iterable<SeenItem>;
}

export interface Out {
  layer: number;
  row: number;
  pos: number;
  values: ArrayLike<number>;
}

export interface ForwardResult {
  /** every attention layer, row and real query of the forward */
  seen: Seen[];
  /** null: the engine computes no outputs */
  out?: Out[] | null;
}

type Maybe<T> = T | Promise<T>;
/** A mutating method returns nothing (changed in place) or a new layout. */
type Changed<C> = Maybe<C | void | null | undefined>;

/**
 * An engine's adapter: the methods of python/kvspec/adapter.py over layout
 * objects of the author's type C. Leave out what the engine does not have:
 * the kit answers not_applicable for it. Sync or async.
 */
export interface Adapter<C = unknown> {
  /** the engine's name, for reports */
  name?: string;
  version?: string;
  /** observations the engine does not have */
  unobserved?: Iterable<"kind" | "trimmable" | "bytes_per_token" | "out">;
  /** the storage types (kv=) the engine can keep; a trace with another is not applicable */
  storageTypes?: Iterable<"f32" | "bf16" | "q8_0" | "q4_0">;
  /** why the other storage types are not expressible (the not-applicable reason) */
  storageWhy?: string;
  /** the runner's --setting values; returns the settings in effect; throw for an unknown one */
  configure?(settings: Record<string, string>): Maybe<Record<string, string> | void>;

  create?(rows: number, layers: Layer[]): Maybe<C>;
  forward?(cache: C, columns: number, ids: number[][], positions: number[][], left: number[],
           right: number[], decode: boolean): Maybe<ForwardResult>;
  trim?(cache: C, n: number, bypass: boolean): Changed<C>;
  arm?(cache: C): Changed<C>;
  accept?(cache: C, keep: number[]): Changed<C>;
  fork?(cache: C): Maybe<C>;
  filter?(cache: C, rows: number[]): Changed<C>;
  join?(cache: C, other: C): Changed<C>;
  extract?(cache: C, row: number): Maybe<C>;
  save?(cache: C): Maybe<Uint8Array>;
  load?(data: Uint8Array, like: C): Maybe<C>;
  /** default: save, then load */
  reload?(cache: C): Maybe<C>;
  positions?(cache: C): Maybe<ArrayLike<number>>;
  trimmable?(cache: C, layer: number): Maybe<boolean>;
  kind?(cache: C, layer: number): Maybe<string>;
  bytes_per_token?(cache: C, layer: number): Maybe<number>;
  /** null when equal in everything observable, else a short description */
  difference?(a: C, b: C): Maybe<string | null | undefined>;
}

export interface ServeOptions {
  /** default: process.stdin */
  input?: NodeJS.ReadableStream;
  /** default: process.stdout (console.log then goes to stderr) */
  output?: NodeJS.WritableStream;
  /** exit the process after shutdown when serving process.stdout (default true) */
  exit?: boolean;
}

/** The protocol's state: the handle table and the dispatch of requests. */
export declare class Session<C = unknown> {
  constructor(adapter: Adapter<C>);
  readonly handles: Map<string, C>;
  /** one request line in, its answer line out */
  handle(line: string): Promise<string>;
}

/** Serves the protocol for adapter until shutdown or the end of input. */
export declare function serve<C>(adapter: Adapter<C>, options?: ServeOptions): Promise<Session<C>>;

/** TRACE.md "Values": splitmix64's finaliser. */
export declare function mix(z: bigint): bigint;
export declare function tokenSeed(layer: number, id: number, pos: number): bigint;
export declare function weightSeed(layer: number): bigint;
/** draws start+1 .. start+count of a stream, floats in [-1, 1) */
export declare function stream(seed: bigint, count: number, start?: number): Float32Array;
/** the contents of attention token (layer, id, pos) */
export declare function attentionToken(layer: number, id: number, pos: number, heads: number,
                                       qheads: number, dim: number):
  { q: Float32Array; k: Float32Array; v: Float32Array };
/** softmax((q . k) / sqrt(dim)) v per query head, float64 */
export declare function attend(q: ArrayLike<number>, keys: ArrayLike<number>[],
                               values: ArrayLike<number>[], heads: number, qheads: number,
                               dim: number): Float64Array;
/** bytes of one head row of `dim` values stored as `kv` ("f32", "bf16", "q8_0", "q4_0") */
export declare function rowBytes(kv: string, dim: number): number;
/** what keys or values (head rows of `dim` values) read back as once stored as `kv` */
export declare function stored(kv: string, x: ArrayLike<number>, dim: number): Float32Array;
/** the contents of recurrent token (layer, id, pos): x [2*kheads*dk + heads*dv], a, b [heads] */
export declare function recurrentToken(layer: number, id: number, pos: number, heads: number,
                                       kheads: number, dk: number, dv: number):
  { x: Float32Array; a: Float32Array; b: Float32Array };
/** a recurrent layer's conv weights, channel-major [channels * conv], each halved */
export declare function convWeights(layer: number, channels: number, conv: number): Float32Array;
