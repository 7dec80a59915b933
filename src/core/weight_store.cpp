#include "core/weight_store.hpp"

#include <algorithm>

namespace softneuro::core {

std::shared_ptr<const void> WeightStore::get_or_make(const std::string& key,
                                                     const std::function<std::shared_ptr<const void>()>& make) {
  std::unique_lock lock(mutex_);
  for (;;) {
    Entry& e = entries_[key];
    if (auto alive = e.object.lock()) return alive;
    if (!e.building) break;
    done_.wait(lock);
  }
  entries_[key].building = true;
  lock.unlock();
  // Built outside the lock: preparing one layer may take long (a large
  // reorder), and other layers' weights need not wait for it.
  std::shared_ptr<const void> made;
  try {
    made = make();
  } catch (...) {
    lock.lock();
    entries_[key].building = false;
    done_.notify_all();
    throw;
  }
  lock.lock();
  Entry& e = entries_[key];
  e.object = made;
  e.building = false;
  ++built_;
  done_.notify_all();
  // Entries whose objects are gone (shapes a session dropped) are swept once
  // the map has doubled since the last sweep: memory stays flat over any
  // number of shapes, at amortised constant cost.
  if (entries_.size() >= 2 * swept_size_) {
    std::erase_if(entries_, [](const auto& kv) { return !kv.second.building && kv.second.object.expired(); });
    swept_size_ = std::max<std::size_t>(entries_.size(), 64);
  }
  return made;
}

std::size_t WeightStore::entries() const {
  std::lock_guard lock(mutex_);
  return entries_.size();
}

uint64_t WeightStore::built() const {
  std::lock_guard lock(mutex_);
  return built_;
}

}  // namespace softneuro::core
