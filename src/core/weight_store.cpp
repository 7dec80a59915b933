#include "core/weight_store.hpp"

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
  return made;
}

uint64_t WeightStore::built() const {
  std::lock_guard lock(mutex_);
  return built_;
}

}  // namespace softneuro::core
