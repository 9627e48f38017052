// InRegister, per Highway target: a vector held in a register, so that the
// compiler does not fold its load into each instruction that uses it (one
// load, not one per use). Used by the attention kernel (a query vector that
// meets several keys) and the gated delta step (a state vector that feeds
// two products).
//
// Included once per target (foreach_target), hence the toggle guard instead
// of #pragma once.
#if defined(KVSPEC_KERNELS_IN_REGISTER_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef KVSPEC_KERNELS_IN_REGISTER_INL_H_
#undef KVSPEC_KERNELS_IN_REGISTER_INL_H_
#else
#define KVSPEC_KERNELS_IN_REGISTER_INL_H_
#endif

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace kvspec {
namespace HWY_NAMESPACE {

// An empty asm statement: no instruction is added.
template <class V>
HWY_INLINE V InRegister(V v) {
#if HWY_ARCH_X86 && HWY_TARGET != HWY_EMU128 && (defined(__GNUC__) || defined(__clang__))
  asm("" : "+x"(v.raw));
#endif
  return v;
}

}  // namespace HWY_NAMESPACE
}  // namespace kvspec
HWY_AFTER_NAMESPACE();

#endif  // KVSPEC_KERNELS_IN_REGISTER_INL_H_
