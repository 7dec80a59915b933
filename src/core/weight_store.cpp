#include "core/weight_store.hpp"

#include <algorithm>

namespace softneuro::core {

std::shared_ptr<const void> WeightStore::get_or_make(const std::string& key,
                                                     const std::function<std::shared_ptr<const void>()>& make,
                                                     const PreparedCodec* codec) {
  std::unique_lock lock(mutex_);
  for (;;) {
    Entry& e = entries_[key];
    if (auto alive = e.object.lock()) return alive;
    if (!e.building) break;
    done_.wait(lock);
  }
  entries_[key].building = true;
  const Blob* stored = nullptr;
  if (codec && prepared_)
    if (auto it = prepared_->find(key); it != prepared_->end()) stored = &it->second;
  lock.unlock();
  // Built outside the lock: preparing one layer may take long (a large
  // reorder), and other layers' weights need not wait for it.
  std::shared_ptr<const void> made;
  bool read = false;
  try {
    // Bytes that do not fit what the routine reads (another build's packing
    // under the same key) are not used: the object is built as without them.
    if (stored) made = codec->load(*stored);
    read = made != nullptr;
    if (!made) made = make();
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
  if (recording_ && codec) e.save = codec->save;
  ++(read ? loaded_ : built_);
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

void WeightStore::use_prepared(std::shared_ptr<const std::map<std::string, Blob>> prepared) {
  std::lock_guard lock(mutex_);
  prepared_ = std::move(prepared);
}

std::map<std::string, Blob> WeightStore::saved() const {
  std::map<std::string, std::pair<std::shared_ptr<const void>, std::function<Blob(const void*)>>> live;
  {
    std::lock_guard lock(mutex_);
    for (const auto& [key, e] : entries_)
      if (e.save)
        if (auto alive = e.object.lock()) live.emplace(key, std::make_pair(std::move(alive), e.save));
  }
  std::map<std::string, Blob> out;
  for (const auto& [key, object] : live)
    if (Blob bytes = object.second(object.first.get()); bytes.data()) out.emplace(key, std::move(bytes));  // (empty: not stored)
  return out;
}

uint64_t WeightStore::loaded() const {
  std::lock_guard lock(mutex_);
  return loaded_;
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
