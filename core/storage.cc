#include "core/storage.h"

namespace gpipe {

Storage::Storage(size_t bytes, Device device, MemoryCategory category)
    : nbytes_(bytes), device_(device), category_(category), allocator_(&allocator_for(device)) {
  data_ = allocator_->allocate(bytes, category);
}

void Storage::set_category(MemoryCategory c) {
  allocator_->recharge(nbytes_, category_, c);
  category_ = c;
}

Storage::~Storage() { allocator_->deallocate(data_, nbytes_, category_); }

}  // namespace gpipe
