#include "core/storage.h"

namespace gpipe {

Storage::Storage(size_t bytes, Device device, MemoryCategory category)
    : nbytes_(bytes), device_(device), category_(category), allocator_(&allocator_for(device)) {
  data_ = allocator_->allocate(bytes, category);
}

Storage::~Storage() { allocator_->deallocate(data_, nbytes_, category_); }

}  // namespace gpipe
