// Storage: one owned, aligned allocation on one device, charged to the
// category that was current when it was made. Tensors share storages.
#pragma once

#include <cstddef>
#include <memory>

#include "core/allocator.h"
#include "core/device.h"

namespace gpipe {

class Storage {
 public:
  // Allocates `bytes` on `device`, charged to `category`.
  Storage(size_t bytes, Device device, MemoryCategory category);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  MemoryCategory category() const { return category_; }
  // Charges these bytes to `c` from now on (Allocator::recharge).
  void set_category(MemoryCategory c);

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  MemoryCategory category_;
  Allocator* allocator_;
};

}  // namespace gpipe
