// BufferPool: a planned bucket's buffer is reused once released, never while someone holds it.
#include "runtime/planes/buffer_pool.h"

#include <catch2/catch.hpp>

namespace overlap {
namespace {

TEST_CASE("A released buffer is handed out again; a held one never is") {
  BufferPool pool(2);
  BufferPool::Buffer first = pool.Take(7, 1000);
  REQUIRE(first->size() == 1000);
  uint8_t* const first_data = first->data();
  BufferPool::Buffer second = pool.Take(7, 1000);
  CHECK(second->data() != first_data);  // the first is still held
  CHECK(pool.held_bytes() == 2000);
  first.reset();
  BufferPool::Buffer again = pool.Take(7, 1000);
  CHECK(again->data() == first_data);
  CHECK(pool.held_bytes() == 2000);
}

TEST_CASE("Slots and sizes are kept apart") {
  BufferPool pool;
  uint8_t* data = nullptr;
  {
    BufferPool::Buffer b = pool.Take(1, 64);
    data = b->data();
  }
  BufferPool::Buffer other_slot = pool.Take(2, 64);
  CHECK(other_slot->data() != data);
  BufferPool::Buffer other_size = pool.Take(1, 128);
  CHECK(other_size->size() == 128);
  CHECK(other_size->data() != data);
  CHECK(pool.Take(1, 64)->data() == data);
}

TEST_CASE("Past max_per_slot, buffers are allocated and not kept") {
  BufferPool pool(1);
  BufferPool::Buffer kept = pool.Take(0, 16);
  BufferPool::Buffer extra = pool.Take(0, 16);
  CHECK(extra->data() != kept->data());
  CHECK(pool.held_bytes() == 16);
  (*extra)[15] = 5;  // a usable buffer of the requested size
  pool.Clear();
  CHECK(pool.held_bytes() == 0);
  CHECK(kept->size() == 16);  // a buffer handed out outlives Clear
}

}  // namespace
}  // namespace overlap
