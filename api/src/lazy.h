// The lazy core: each thread's pending list of storages, and the sync that
// turns every live pending storage of a device into one graph, runs it, and
// hands each storage its buffer.
#pragma once
#include <memory>

#include <loom/device.h>

#include "api/src/tensor_impl.h"

namespace loom::detail {

// Adds a storage that just became pending to this thread's list, and cuts
// the graph (syncs) once more nodes than max_pending_nodes() were recorded.
void note_pending(const std::shared_ptr<Storage>& s, int64_t nodes_recorded);
// The same for a storage created just now by this thread (wrap()), which no
// other thread can have listed yet.
void note_new_pending(const std::shared_ptr<Storage>& s, int64_t nodes_recorded);

// Materializes `s` (and with it everything pending on its device).
void materialize(const std::shared_ptr<Storage>& s);

}  // namespace loom::detail
