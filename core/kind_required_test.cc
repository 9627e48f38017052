// Compile-time check, run by ctest (label unit) in three variants: a cache
// type that declares a kind compiles; one that forgets kKind, or declares
// an empty one, must not compile (kind_required_missing and
// kind_required_empty are expected to fail).
#include <memory>
#include <string_view>

#include "kvspec/core/kv_cache.h"

namespace kvspec {

class ForgetfulCache final : public WithKind<ForgetfulCache, ColumnStore> {
 public:
#if defined(KVSPEC_DECLARE_KIND)
  static constexpr std::string_view kKind = "forgetful";
#elif defined(KVSPEC_EMPTY_KIND)
  static constexpr std::string_view kKind = "";
#endif
  ForgetfulCache() : WithKind(1, 1, 1, 0, 0) {}
  std::unique_ptr<Cache> Copy() const override { return nullptr; }
};

}  // namespace kvspec

int main() {
  kvspec::ForgetfulCache cache;
  return cache.kind().empty() ? 1 : 0;
}
