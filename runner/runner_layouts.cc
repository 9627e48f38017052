// Names and budgets: the statements that make, select, combine and reload
// named layouts, and the memory budget they are held to.
#include <algorithm>
#include <fstream>
#include <string>

#include "kvspec/core/codec/codec.h"
#include "kvspec/runner/runner_internal.h"

namespace kvspec::trace::runner_internal {

Outcome Runner::Fork(const ForkOp& fork) {
  const std::string& name = fork.name;
  if (layouts_.count(name)) {
    return Outcome::Refused("fork: a layout named '" + name + "' exists");
  }
  if (Outcome o = Budget(Cur().allocatedBytes(), "fork"); o.code) return o;
  NamedLayout copy;
  copy.layout = Cur().Copy();
  copy.last = Last();
  layouts_[name] = std::move(copy);
  return {};
}

Outcome Runner::Use(const UseOp& use) {
  const std::string& name = use.name;
  if (!layouts_.count(name)) {
    return Outcome::Refused("use: no layout named '" + name + "'");
  }
  current_ = name;
  return {};
}

Outcome Runner::Join(const JoinOp& join) {
  const std::string& name = join.name;
  auto it = layouts_.find(name);
  if (it == layouts_.end()) {
    return Outcome::Refused("join: no layout named '" + name + "'");
  }
  if (name == current_) return Outcome::Refused("join: a layout cannot join itself");
  const Layout& other = *it->second.layout;
  // The joined layers, built while both layouts stay allocated.
  if (Outcome o = Budget(Cur().BytesAfterJoin(other), "join"); o.code) return o;
  if (Cur().rows() + other.rows() > kMaxRows) {
    return Outcome::Refused("join: " + std::to_string(Cur().rows() + other.rows()) +
                            " rows exceed the limit of " + std::to_string(kMaxRows));
  }
  Status s = Cur().Join(other);
  if (!s.ok()) return Outcome::Refused(s.message());
  Last() = LastForward();
  return {};
}

Outcome Runner::Filter(const FilterOp& filter) {
  // The kept rows' layers, built while the layout stays allocated.
  if (Outcome o = Budget(Cur().BytesAfterFilter(filter.rows), "filter"); o.code) return o;
  Status s = Cur().Filter(filter.rows);
  if (!s.ok()) return Outcome::Refused(s.message());
  Last() = LastForward();
  return {};
}

Outcome Runner::Extract(const ExtractOp& extract) {
  if (layouts_.count(extract.name)) {
    return Outcome::Refused("extract: a layout named '" + extract.name + "' exists");
  }
  if (Outcome o = Budget(Cur().BytesOfExtract(extract.row), "extract"); o.code) return o;
  std::unique_ptr<Layout> extracted;
  Status s = Cur().Extract(extract.row, &extracted);
  if (!s.ok()) return Outcome::Refused(s.message());
  layouts_[extract.name].layout = std::move(extracted);
  return {};
}

Outcome Runner::Reload(const Statement& st) {
  // Through the persistence codec and back; the last forward stays.
  if (Outcome o = Budget(2 * Cur().allocatedBytes(), "reload"); o.code) return o;
  std::string bytes;
  Status s = EncodeLayout(Cur(), &bytes);
  std::unique_ptr<Layout> loaded;
  // The encoded bytes and the decoded copy are held at once.
  if (s.ok()) {
    if (Outcome o = Budget(bytes.size() + Cur().allocatedBytes(), "reload"); o.code) return o;
  }
  if (s.ok() && !opt_.save_reloads_dir.empty()) {
    const std::string base = p_.file.substr(p_.file.find_last_of('/') + 1);
    const std::string path =
        opt_.save_reloads_dir + "/" + base + "." + std::to_string(st.line) + ".kvsl";
    std::ofstream file(path, std::ios::binary);
    file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!file) return Outcome::Refused("reload: cannot write " + path);
  }
  if (s.ok()) s = DecodeLayout(bytes, &loaded);
  if (!s.ok()) return Outcome::Refused("reload: " + s.message());
  loaded->set_reference_kernels(opt_.reference_kernels);
  // A reload changes the layout (TRACE.md rule 3): no bypass trim after it.
  loaded->ForgetBypassBound();
  layouts_[current_].layout = std::move(loaded);
  return {};
}

}  // namespace kvspec::trace::runner_internal
