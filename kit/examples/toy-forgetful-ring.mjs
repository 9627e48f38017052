// The toy engine with a ring that forgets to evict: once a ring has wrapped,
// a trim or a rollback only moves the counters back -- the rejected tokens
// stay in storage, visible to the next queries beside the tokens rewritten
// at their positions, and a trim that should be refused goes through. The
// conformance runner must catch it (as python/kvspec/adapters/naive_ring.py).
import { serve, Refused } from "../index.js";
import { ToyAdapter } from "./toy-cache.js";

class ForgetfulRing extends ToyAdapter {
  name = "toy-forgetful-ring";

  wrappedRing(c) {
    return c.layers.some((l) => l.ring && c.peak > l.capacity);
  }

  trim(c, n, bypass) {
    if (!this.wrappedRing(c)) return super.trim(c, n, bypass);
    if (c.armed) throw new Refused("trim while a round is armed");
    this.moveCounters(c, new Array(c.rows).fill(n));
  }

  accept(c, keep) {
    if (!(c.armed && c.verified && this.wrappedRing(c))) return super.accept(c, keep);
    keep.forEach((k, r) => {
      if (k > c.verifyReal[r]) throw new Refused(`accept ${k}: row ${r} has only ${c.verifyReal[r]} tokens`);
    });
    this.moveCounters(c, c.verifyReal.map((n, r) => n - keep[r]));
    c.armed = c.verified = false;
  }

  moveCounters(c, drop) {
    for (let r = 0; r < c.rows; r++) c.next[r] -= drop[r];
    c.columns -= Math.min(...drop);
    c.bypassBound = null;
  }
}

serve(new ForgetfulRing());
