// overlap's C ABI: the entry points of liboverlap.so that the Python adapters call through
// ctypes, so that no framework binding compiles its own copy of the core (DESIGN.md section 9).
//
// Conventions:
// - Functions return 0 on success and otherwise an absl::StatusCode value; the message of the
//   calling thread's last failure (naming the rank, the tensor and the cause) is then in
//   overlap_last_error(), valid until that thread's next failing call.
// - Tensors are caller-owned memory described by overlap_tensor; the memory must stay valid and
//   untouched until the operation's handle completes (the Python layer keeps a reference).
// - A handle is an opaque pointer from an op function; free it with overlap_handle_free once
//   done with it (the operation goes on if it is freed early).
// - Every function may be called from any thread.
#ifndef OVERLAP_RUNTIME_C_API_H_
#define OVERLAP_RUNTIME_C_API_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// The ABI version; bumped when a signature below changes. Python checks it at load time.
#define OVERLAP_C_API_VERSION 12
int overlap_c_api_version(void);

typedef struct overlap_handle overlap_handle;

typedef struct {
  void* data;
  int64_t capacity_bytes;
  int32_t dtype;  // overlap::DataType value
  int32_t ndim;
  const int64_t* shape;  // ndim entries
  int32_t device_kind;   // overlap::DeviceKind value: 0 CPU, 1 CUDA
  int32_t device_index;  // CUDA device ordinal
  void* stream;          // CUDA: the cudaStream_t the producer wrote `data` on; null: default
} overlap_tensor;

const char* overlap_last_error(void);

// CUDA devices the library sees; 0 when built without CUDA, or without a driver or GPU.
int overlap_cuda_device_count(void);
// Build queries, usable before init: 1 when the library was built with CUDA (whatever this machine
// has), else 0; the NCCL version it runs with (22803 for 2.28.3), 0 when built without CUDA.
int overlap_cuda_built(void);
int overlap_nccl_version(void);
// 1 when an allreduce of CUDA tensors compressed with `spec` (a compressor configuration, e.g.
// "topk:ratio=0.01") runs on the GPU, with the CUDA kernels; 0 when the spec is invalid, the
// compressor has no CUDA kernels, or the library was built without CUDA.
int overlap_cuda_compresses(const char* spec);

// Init from the OVERLAP_* environment variables.
int overlap_init(void);
// Init with `count` settings given in code (an adapter's init options) over the environment's:
// names[i] an OVERLAP_* runtime setting (docs/tuning.md), values[i] its value as text, read as the
// variable would be (C API 9). An unknown name or a value the setting does not accept fails
// with OVERLAP_INVALID_ARGUMENT (3) naming it, on every rank.
int overlap_init_with_settings(int32_t count, const char* const* names, const char* const* values);
// The configuration the runtime runs with, as a JSON object of every runtime setting's OVERLAP_*
// name to its value as text (C API 9); NULL before init and after shutdown. The string is valid
// until this thread's next call.
const char* overlap_config_json(void);
int overlap_shutdown(void);
// overlap::Abort(reason): for a process about to exit after an error (C API 7).
int overlap_abort(const char* reason);
int overlap_is_initialized(void);
int overlap_rank(void);
int overlap_size(void);
int overlap_local_rank(void);
int overlap_local_size(void);

int overlap_start_forward(void);
int overlap_start_backward(void);
int overlap_start_update(void);
// overlap::NoteUpdateTime.
int overlap_note_update_ms(double ms);

int overlap_start_timeline(const char* path);
int overlap_stop_timeline(void);

// Operations. `op` is an overlap::ReduceOp value (0 sum, 1 average, 2 min, 3 max, 4 product,
// 5 adasum); `compression` may be NULL or "".
int overlap_allreduce(const char* name, const overlap_tensor* input, const overlap_tensor* output,
                      int32_t op, double prescale, double postscale, const char* compression,
                      overlap_handle** handle);
// An allreduce with a delayed update or update period (AllreduceOptions::delay, period, phase;
// runtime/planes/delay_line.h); overlap_handle_has_update tells whether its output holds an update.
int overlap_allreduce_delayed(const char* name, const overlap_tensor* input,
                              const overlap_tensor* output, int32_t op, double prescale,
                              double postscale, const char* compression, int32_t delay,
                              int32_t period, int32_t phase, overlap_handle** handle);
// An allreduce of a gradient, which a delayed plan may deliver late
// (AllreduceOptions::plan_may_delay; the distributed optimizers call this). Any other allreduce
// always completes with its own submission's result; overlap_handle_has_update tells whether a
// gradient's output holds an update this step.
int overlap_allreduce_gradient(int32_t process_set, const char* name, const overlap_tensor* input,
                               const overlap_tensor* output, int32_t op, double prescale,
                               double postscale, const char* compression, overlap_handle** handle);
// An allreduce with AllreduceOptions' flags: OVERLAP_ALLREDUCE_GRADIENT sets plan_may_delay (as
// overlap_allreduce_gradient), OVERLAP_ALLREDUCE_INDEPENDENT_OF_RESULTS independent_of_results
// (the input needs no result the program waited for; overlap.tensorflow's traced steps),
// OVERLAP_ALLREDUCE_LOOKS_AHEAD looks_ahead (its optimizer looks ahead under delays: the
// planner charges that).
#define OVERLAP_ALLREDUCE_GRADIENT 1
#define OVERLAP_ALLREDUCE_INDEPENDENT_OF_RESULTS 2
#define OVERLAP_ALLREDUCE_LOOKS_AHEAD 4
int overlap_allreduce_flags(int32_t process_set, const char* name, const overlap_tensor* input,
                            const overlap_tensor* output, int32_t op, double prescale,
                            double postscale, const char* compression, int32_t flags,
                            overlap_handle** handle);
int overlap_grouped_allreduce(int32_t count, const char* const* names, const overlap_tensor* inputs,
                              const overlap_tensor* outputs, int32_t op, double prescale,
                              double postscale, const char* compression, overlap_handle** handle);
int overlap_allgather(const char* name, const overlap_tensor* input, overlap_handle** handle);
int overlap_broadcast(const char* name, const overlap_tensor* input, const overlap_tensor* output,
                      int32_t root, overlap_handle** handle);
int overlap_reducescatter(const char* name, const overlap_tensor* input, int32_t op,
                          double prescale, double postscale, overlap_handle** handle);
// `splits` may be NULL (equal parts) or hold `nsplits` == size row counts.
int overlap_alltoall(const char* name, const overlap_tensor* input, const int64_t* splits,
                     int32_t nsplits, overlap_handle** handle);
int overlap_barrier(overlap_handle** handle);
int overlap_join(overlap_handle** handle);

// Process sets (overlap.h, AddProcessSet). Adding and removing are collective over every rank;
// `ranks` are global ranks, sorted and unique.
int overlap_add_process_set(const int32_t* ranks, int32_t count, int32_t* id);
int overlap_remove_process_set(int32_t id);
// Queries: NOT_FOUND (5) for an unknown id; overlap_process_set_rank fails with
// FAILED_PRECONDITION (9) on a rank that is not a member.
int overlap_process_set_rank(int32_t id, int32_t* rank);
int overlap_process_set_size(int32_t id, int32_t* size);
// Writes up to `max` of set `id`'s global ranks; `count` receives how many it has.
int overlap_process_set_ranks(int32_t id, int32_t* ranks, int32_t max, int32_t* count);
// Writes up to `max` registered ids, 0 first, and returns how many there are (0 before Init).
int32_t overlap_process_set_ids(int32_t* ids, int32_t max);

// The operations above on process set `process_set` (0, the global set, is the same as the
// function without _ps). Broadcast's root is a global rank, a member of the set.
int overlap_allreduce_ps(int32_t process_set, const char* name, const overlap_tensor* input,
                         const overlap_tensor* output, int32_t op, double prescale,
                         double postscale, const char* compression, overlap_handle** handle);
int overlap_grouped_allreduce_ps(int32_t process_set, int32_t count, const char* const* names,
                                 const overlap_tensor* inputs, const overlap_tensor* outputs,
                                 int32_t op, double prescale, double postscale,
                                 const char* compression, overlap_handle** handle);
int overlap_allgather_ps(int32_t process_set, const char* name, const overlap_tensor* input,
                         overlap_handle** handle);
int overlap_broadcast_ps(int32_t process_set, const char* name, const overlap_tensor* input,
                         const overlap_tensor* output, int32_t root, overlap_handle** handle);
int overlap_reducescatter_ps(int32_t process_set, const char* name, const overlap_tensor* input,
                             int32_t op, double prescale, double postscale,
                             overlap_handle** handle);
int overlap_alltoall_ps(int32_t process_set, const char* name, const overlap_tensor* input,
                        const int64_t* splits, int32_t nsplits, overlap_handle** handle);
int overlap_barrier_ps(int32_t process_set, overlap_handle** handle);

// 1 once finished (successfully or not), else 0.
int overlap_handle_poll(const overlap_handle* handle);
// 0 when a finished delayed allreduce's output holds no update this step (it was zeroed), else 1.
int overlap_handle_has_update(const overlap_handle* handle);
// Waits up to `timeout_s` (< 0: as Handle::Wait() in overlap.h, until it finishes or the wait
// bound passes). Returns the operation's status; DEADLINE_EXCEEDED (4) if it is still running.
int overlap_handle_wait(const overlap_handle* handle, double timeout_s);
// The backstop on a wait for one operation (C API 10): the runtime's OVERLAP_STALL_TIMEOUT_S plus
// OVERLAP_COLLECTIVE_TIMEOUT_S plus 30 s, and the two settings; before init and after shutdown,
// those of the defaults (630 s). The runtime ends every operation sooner; an adapter that waits
// in slices (so that Ctrl-C gets through) gives up after the bound with overlap_wait_expired.
int overlap_wait_bound(double* bound_s, double* stall_timeout_s, double* collective_timeout_s);
// Fails with DEADLINE_EXCEEDED (4), and returns it, with the error of a wait on `what` (e.g.
// "allreduce 'grad.0'") that gave up after `waited_s` seconds: Handle::Wait()'s own, naming the
// rank and both settings and asking for a report (C API 10).
int overlap_wait_expired(const char* what, double waited_s);
// Waits for `n` handles in order, all within `timeout_s` (< 0: no limit). Returns 0 when every
// one succeeded, with has_update[i] (when not null) as overlap_handle_has_update gives it; else
// the status of the first that failed, or DEADLINE_EXCEEDED (4) when the time ran out, with that
// handle's index in *first_not_ok and in *running (when not null) 1 if the time ran out while it
// was still running, 0 if it ended with that status (an operation's own DEADLINE_EXCEEDED). One
// call for the handles of a step's gradients: a foreign-function call per handle costs more than
// the wait itself.
int overlap_handles_wait(overlap_handle* const* handles, int32_t n, double timeout_s,
                         int32_t* has_update, int32_t* first_not_ok, int32_t* running);
// The runtime-owned result of allgather, reducescatter and alltoall after success: data, dtype,
// rank and up to `max_ndim` dims. The data lives until the handle is freed, on the operation's
// device: a CUDA operation's result is device memory (read it with overlap_handle_copy_output).
int overlap_handle_output(const overlap_handle* handle, const void** data, int32_t* dtype,
                          int32_t* ndim, int64_t* shape, int32_t max_ndim);
// Copies the result overlap_handle_output describes to `dst` (`bytes` of memory on the same
// device: host memory for a CPU result, device memory for a CUDA one) and returns once the copy
// is done.
int overlap_handle_copy_output(const overlap_handle* handle, void* dst, int64_t bytes);
// Alltoall: rows received from each rank; writes up to `max` entries, returns the count.
int32_t overlap_handle_received_splits(const overlap_handle* handle, int64_t* splits, int32_t max);
void overlap_handle_free(overlap_handle* handle);

// Stats() as a JSON object; valid until this thread's next call of it.
const char* overlap_stats_json(void);

// The delays and periods the plan in force gives each gradient (overlap.h, PlanSchedule; C API 8):
// {"generation":g,"first_step":s,"first_pass":p,"tensors":{"name":[[offset,count,delay,period,
// phase],...],...}}; valid until this thread's next call of it.
const char* overlap_plan_schedule_json(void);
// PlanSchedule::generation and the forward markers so far (overlap.h, CurrentPlanClock).
int overlap_plan_clock(int64_t* generation, int64_t* step);

// Compression state for checkpoints. Save: the bytes are valid until this thread's next call.
int overlap_save_compression_state(const char** data, int64_t* size);
int overlap_restore_compression_state(const char* data, int64_t size);

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // OVERLAP_RUNTIME_C_API_H_
