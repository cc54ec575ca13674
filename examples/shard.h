// Which rows of a global batch belong to which rank.
#ifndef OVERLAP_EXAMPLES_SHARD_H_
#define OVERLAP_EXAMPLES_SHARD_H_

#include <cstdint>

namespace overlap {
namespace examples {

struct RowRange {
  int64_t begin = 0;
  int64_t count = 0;
};

// Rank `rank` of `size` takes a contiguous slice of a batch of `rows`: earlier ranks take one
// extra row when the batch does not divide (the split overlap::ReduceScatter uses). A rank may get
// zero rows when the batch is smaller than the number of ranks.
inline RowRange ShardOf(int64_t rows, int rank, int size) {
  const int64_t quotient = rows / size;
  const int64_t remainder = rows % size;
  return {rank * quotient + (rank < remainder ? rank : remainder),
          quotient + (rank < remainder ? 1 : 0)};
}

}  // namespace examples
}  // namespace overlap

#endif  // OVERLAP_EXAMPLES_SHARD_H_
