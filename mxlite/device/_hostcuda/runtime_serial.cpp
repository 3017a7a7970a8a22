// runtime_serial.cpp: the serial runtime behind cuda_host.h, for CPU devices (HOSTCUDA_SERIAL).
//
// A serial module runs a kernel with ONE thread per block: cuda_host.h makes threadIdx (0,0,0)
// and blockDim (1,1,1) compile-time constants, so a kernel's `for (i = begin + threadIdx.x; i <
// end; i += blockDim.x)` becomes a plain unit-stride loop that g++ vectorises. No fibers, no signal
// handlers: this is the production CPU path of the fused kernels, not the emulation (that is
// runtime_fibers.cpp, with real block sizes, shuffled schedules and the checks that come with them).
//
// Blocks over cores. The blocks of a grid are independent (a CUDA block may not wait for another),
// so they may run on several OS threads at once, each block whole on one thread, and every element
// comes out with the same bits whatever the number of threads: only which thread computes a block
// changes, not what it computes. The exception is blocks that meet through atomics (an atomic float
// sum depends on the order of its additions): the launcher (launch.py) gives every kernel that can
// reach an atomic a budget of one thread, so its blocks run in grid order on the calling thread, as
// before; an atomic executed in a launch allowed more than one thread traps, so a kernel the launcher
// misjudged fails loudly instead of summing in a varying order. blockIdx and `__shared__` variables
// are thread_local in this build (cuda_host.h).
//
// How a launch spreads: the calling thread claims blocks one at a time from a shared counter and runs
// them, timing itself; once the work still to do, estimated from the time per block so far, is worth
// it (kMinSpreadNanos per extra thread), it wakes up to (budget - 1) pool threads, which claim blocks
// from the same counter. A pool thread that wakes late finds nothing left and goes back to sleep; the
// caller waits only for threads that hold a block. So a small launch (an RNN cell step over a small
// batch, the update of a small model) stays on the calling thread, and a pool thread that the system
// does not schedule (a busy machine) delays nothing: the others take its share. Pool threads sleep on
// a condition variable between launches (no spinning) and are started by the first launch that
// spreads. The launch argument that the fiber build uses as its scheduling seed carries the thread
// budget here (there is no schedule to seed).
//
// Launches from several threads: the launch state a kernel reads (gridDim, the kernel's name for
// messages, whether the launch spreads) is per OS thread, so launches made on different threads run
// at once. A launch that keeps to its calling thread (a budget of one: the pieces of
// mxlite/device/parallel.py, each running its own im2col/col2im or bias-and-ReLU on its own piece of a
// batch, and the recurrent layers' native loops) takes no lock; a launch that may spread takes the
// pool's launch mutex, since the pool serves one launch at a time, and pool threads that join it copy
// its state to their own. Without this, two pieces' launches of one module ran one after the other
// (col2im of a 64-sample batch in five pieces on two threads: 2.7 ms, against 1.2 ms as one launch).
//
// Fork: a child process has only the thread that forked (DataLoader workers fork), so the child
// starts with a fresh, empty pool and a fresh launch mutex; the old ones are left alone.
//
// In a one-thread block a barrier completes at once (the __syncthreads_count/and/or forms return
// the thread's own predicate) and a warp has one live lane: warp operations whose mask is exactly
// lane 0 return what CUDA returns for a lone lane (a shuffle gives back the lane's own value), any
// other mask names lanes that do not exist and fails the launch. __trap() and C++ exceptions fail
// the launch with a message; a bad pointer is an ordinary crash, as for any native code.
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>

// cuda_host.h (force-included first) defines __noinline__ as CUDA's qualifier; libstdc++'s thread
// headers use the attribute __noinline__ itself.
#pragma push_macro("__noinline__")
#undef __noinline__
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#pragma pop_macro("__noinline__")

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace hostcuda {

uint3 g_thread_idx;  // unused by serial kernels (threadIdx is a constant); defined for the shared header
thread_local uint3 g_block_idx;
dim3 g_block_dim{1, 1, 1};
thread_local dim3 g_grid_dim;
thread_local bool g_launch_spread = false;

namespace {

enum ErrorCode : int { kOk = 0, kException = 3, kBadConfig = 4, kTrap = 5, kMisuse = 6 };

const char *const kWarpOpNames[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                    "__syncwarp", "__ballot_sync", "__any_sync", "__all_sync"};

// Spread a launch over one more thread per this much work left. A sleeping thread takes about 5 to
// 20 us to start running after it is woken (futex wake-up and scheduling; more on a virtual machine),
// so work shorter than a few wake-ups is finished sooner by the caller alone, and a pool thread that
// joins it only adds the cost of waking it. 50 us: an LSTM cell step of batch 32 and hidden size 256
// (about 40 us) stays on one thread; an optimizer update of a million float32 values (about 300 us)
// or an im2col over a convolution batch spreads.
constexpr long long kMinSpreadNanos = 50000;
// The caller times its first blocks for at least this long before judging the rest from them
// (a single block can be much faster or slower than the average: caches, a short last chunk).
constexpr long long kProbeNanos = 5000;
// Both can be changed (hostcuda_set_spread) so that tests can make small launches spread.
std::atomic<long long> g_min_spread_ns{kMinSpreadNanos}, g_probe_ns{kProbeNanos};
std::atomic<unsigned long long> g_spread_launches{0}, g_pool_blocks{0};  // counters, for tests

// Thrown by kernel-side failures (trap, misuse) and caught where the block runs.
struct LaunchFailure {
    int code;
    std::string message;
};

// One spreading launch at a time per module: the pool serves one job. A pointer, so that a child forked
// while another thread was inside a launch (the mutex held by a thread the child does not have) starts
// with a fresh one instead of hanging on its first launch; the old one is left alone.
std::mutex *g_launch_mutex = new std::mutex;
thread_local const char *g_kernel = "";
thread_local bool g_in_launch = false;

std::string where() {
    char buf[256];
    snprintf(buf, sizeof buf, "kernel '%s' (serial host build), block (%u,%u,%u) of grid (%u,%u,%u)", g_kernel,
             g_block_idx.x, g_block_idx.y, g_block_idx.z, g_grid_dim.x, g_grid_dim.y, g_grid_dim.z);
    return buf;
}

[[noreturn]] void fail_in_kernel(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
[[noreturn]] void fail_in_kernel(int code, const char *fmt, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    throw LaunchFailure{code, where() + ": " + buf};
}

int report(int code, const std::string &message, char *err, size_t err_len) {
    if (err && err_len) snprintf(err, err_len, "%s", message.c_str());
    return code;
}

long long now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

// One launch's blocks, claimed one at a time from `next` by the caller and by the pool threads that join.
struct Job {
    Invoke invoke;
    void (*fn)();
    void **args;
    const char *kernel;
    unsigned grid_x, grid_y, grid_z;
    unsigned long long nblocks;
    std::atomic<unsigned long long> next{0};
    std::mutex failure_mutex;
    unsigned long long failed_block = ~0ull;  // the lowest failed block: its failure is the one reported
    int code = kOk;
    std::string message;
};

void record_failure(Job &job, unsigned long long block, int code, const std::string &message) {
    std::lock_guard<std::mutex> lock(job.failure_mutex);
    if (block < job.failed_block) {
        job.failed_block = block;
        job.code = code;
        job.message = message;
    }
    job.next.store(job.nblocks);  // nothing more is claimed: a failed launch's outputs are undefined
}

// Runs blocks of `job` until none is left and returns how many it ran. With `stopped` (the caller's
// probe), stops once the clock passes `deadline` with blocks still unclaimed and sets *stopped.
unsigned long long run_blocks(Job &job, long long deadline = 0, bool *stopped = nullptr) {
    unsigned long long ran = 0;
    for (;;) {
        const unsigned long long b = job.next.fetch_add(1, std::memory_order_relaxed);
        if (b >= job.nblocks) return ran;
        const unsigned long long above = b / job.grid_x;
        g_block_idx = uint3{(unsigned)(b % job.grid_x), (unsigned)(above % job.grid_y), (unsigned)(above / job.grid_y)};
        try {
            job.invoke(job.fn, job.args);
        } catch (const LaunchFailure &failure) {
            record_failure(job, b, failure.code, failure.message);
        } catch (const std::exception &e) {
            record_failure(job, b, kException, where() + ": C++ exception escaped the kernel: " + e.what());
        } catch (...) {
            record_failure(job, b, kException, where() + ": a C++ exception escaped the kernel");
        }
        ++ran;
        if (stopped && now_ns() >= deadline && job.next.load(std::memory_order_relaxed) < job.nblocks) {
            *stopped = true;
            return ran;
        }
    }
}

// Threads that run blocks beside the caller; started on demand, asleep between launches.
struct Pool {
    std::mutex mutex;
    std::condition_variable wake, idle;
    Job *job = nullptr;
    unsigned long long generation = 0;
    int seats = 0;    // pool threads the current job still takes
    int working = 0;  // pool threads inside the current job
    int started = 0;

    void worker() {
        unsigned long long seen = 0;
        std::unique_lock<std::mutex> lock(mutex);
        for (;;) {
            wake.wait(lock, [&] { return generation != seen; });
            seen = generation;
            if (seats == 0 || job == nullptr) continue;
            --seats;
            ++working;
            Job *current = job;
            lock.unlock();
#if defined(__x86_64__)
            _mm_setcsr(0x1f80);  // IEEE arithmetic: round to nearest, subnormals kept (as the twins)
#endif
            // the launch's state, as the launching thread set its own (per-thread: see the file header)
            g_kernel = current->kernel;
            g_grid_dim = dim3(current->grid_x, current->grid_y, current->grid_z);
            g_launch_spread = true;
            g_in_launch = true;
            g_pool_blocks.fetch_add(run_blocks(*current), std::memory_order_relaxed);
            g_in_launch = false;
            g_launch_spread = false;
            lock.lock();
            if (--working == 0) idle.notify_all();
        }
    }

    // Offers `want` seats of `j` to pool threads, starting threads until there are `want`.
    void open(Job *j, int want) {
        std::lock_guard<std::mutex> lock(mutex);
        while (started < want) {
            std::thread([this] { worker(); }).detach();  // the pool lives as long as the process
            ++started;
        }
        job = j;
        seats = want;
        ++generation;
        wake.notify_all();
    }

    // Closes the job to latecomers and waits until no pool thread is inside it.
    void close() {
        std::unique_lock<std::mutex> lock(mutex);
        seats = 0;
        job = nullptr;
        idle.wait(lock, [&] { return working == 0; });
    }
};

Pool *g_pool = new Pool;  // never destroyed: its detached threads may still wait on it at exit

void reset_in_child() {
    g_launch_mutex = new std::mutex;
    g_pool = new Pool;  // the parent's pool threads do not exist in the child
    g_in_launch = false;
    g_launch_spread = false;
}
const int g_atfork = pthread_atfork(nullptr, nullptr, reset_in_child);

}  // namespace

// ---- calls from kernel code ------------------------------------------------------------------------
int block_op(int kind, int pred, const char *, int) { return kind == 0 ? 0 : pred; }

unsigned long long warp_op(int kind, unsigned mask, unsigned long long value, int, int width, const char *file,
                           int line) {
    if (mask != 1u)
        fail_in_kernel(kMisuse, "%s with mask 0x%08x at %s:%d: a serial build runs one thread per block, so only "
                       "lane 0 exists (mask 0x00000001)", kWarpOpNames[kind], mask, file, line);
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail_in_kernel(kMisuse, "%s with width %d (must be a power of 2 in 1..32) at %s:%d", kWarpOpNames[kind], width,
                       file, line);
    switch (kind) {
        case 4: return 0;            // __syncwarp
        case 5: return value & 1u;   // __ballot_sync: lane 0's bit
        case 6: case 7: return value;  // __any_sync, __all_sync over the one lane
        default: return value;       // shuffles: a lone lane reads its own value
    }
}

void *dynamic_shared() {
    fail_in_kernel(kMisuse, "extern __shared__ memory: the serial build has no dynamic shared memory");
}
unsigned lane_id() { return 0; }
unsigned warp_id() { return 0; }
unsigned active_mask() { return 1u; }
long long clock_ticks() { return (long long)std::chrono::steady_clock::now().time_since_epoch().count(); }

void trap(const char *what, const char *file, int line) {
    if (!g_in_launch) {
        fprintf(stderr, "hostcuda: %s (%s:%d) outside a launch\n", what, file, line);
        abort();
    }
    fail_in_kernel(kTrap, "executed %s (%s:%d)", what, file, line);
}

// `threads` (the seed slot of the launch entry, see the file header): the most threads this launch
// may use, the caller's included; 0 and 1 mean the calling thread alone.
int run_launch(const char *kernel, Invoke invoke, void (*fn)(), void **args, const unsigned *grid,
               const unsigned *block, unsigned long long shared_mem, unsigned long long threads, char *err,
               size_t err_len) {
    // Only a launch that may spread needs the pool to itself (see the file header).
    std::unique_lock<std::mutex> lock(*g_launch_mutex, std::defer_lock);
    if (threads > 1) lock.lock();
    char buf[256];
    if (block[0] != 1 || block[1] != 1 || block[2] != 1) {
        snprintf(buf, sizeof buf, "kernel '%s': a serial host build runs one thread per block; launched with "
                 "block (%u,%u,%u)", kernel, block[0], block[1], block[2]);
        return report(kBadConfig, buf, err, err_len);
    }
    if (shared_mem != 0) {
        snprintf(buf, sizeof buf, "kernel '%s': a serial host build has no dynamic shared memory (%llu bytes asked)",
                 kernel, shared_mem);
        return report(kBadConfig, buf, err, err_len);
    }
    const unsigned long long nblocks = (unsigned long long)grid[0] * grid[1] * grid[2];
    if (nblocks == 0 || grid[0] > 0x7fffffffu || grid[1] > 65535 || grid[2] > 65535) {
        snprintf(buf, sizeof buf, "kernel '%s': invalid grid (%u,%u,%u)", kernel, grid[0], grid[1], grid[2]);
        return report(kBadConfig, buf, err, err_len);
    }
    const long long budget = threads > 1024 ? 1024 : (long long)threads;
    g_kernel = kernel;
    g_grid_dim = dim3(grid[0], grid[1], grid[2]);
    g_launch_spread = budget > 1;
#if defined(__x86_64__)
    // IEEE arithmetic whatever the caller left in MXCSR: round to nearest, subnormals kept (as the twins).
    const unsigned int saved_csr = _mm_getcsr();
    _mm_setcsr(0x1f80);
#endif
    Job job;
    job.invoke = invoke;
    job.fn = fn;
    job.args = args;
    job.kernel = kernel;
    job.grid_x = grid[0];
    job.grid_y = grid[1];
    job.grid_z = grid[2];
    job.nblocks = nblocks;
    g_in_launch = true;
    bool stopped = false;
    const long long start = now_ns();
    if (budget > 1 && nblocks > 1) run_blocks(job, start + g_probe_ns.load(), &stopped);
    if (stopped) {
        // The blocks done so far and the time they took give the time of the rest.
        const unsigned long long done = job.next.load(std::memory_order_relaxed);
        const unsigned long long rest = done < nblocks ? nblocks - done : 0;
        const double left = (double)(now_ns() - start) / (double)(done ? done : 1) * (double)rest;
        const long long min_spread = g_min_spread_ns.load();
        long long helpers = min_spread > 0 ? (long long)(left / (double)min_spread) : budget - 1;
        if (helpers > budget - 1) helpers = budget - 1;
        if ((unsigned long long)helpers > rest) helpers = (long long)rest;
        if (helpers > 0) {
            g_spread_launches.fetch_add(1, std::memory_order_relaxed);
            Pool *pool = g_pool;
            pool->open(&job, (int)helpers);
            run_blocks(job);
            pool->close();
        }
    }
    run_blocks(job);  // all of it (one thread), or what is left
    g_in_launch = false;
    g_launch_spread = false;
#if defined(__x86_64__)
    _mm_setcsr(saved_csr);
#endif
    return report(job.code, job.message, err, err_len);
}

}  // namespace hostcuda

// For tests and benchmarks: the least work (ns) worth a second thread and how long the caller probes
// first; a negative value leaves that one unchanged. Returns the launches spread so far and, in
// *pool_blocks, the blocks pool threads ran (both counted since the library was loaded).
extern "C" __attribute__((visibility("default"))) unsigned long long hostcuda_set_spread(
    long long min_spread_ns, long long probe_ns, unsigned long long *pool_blocks) {
    if (min_spread_ns >= 0) hostcuda::g_min_spread_ns.store(min_spread_ns);
    if (probe_ns >= 0) hostcuda::g_probe_ns.store(probe_ns);
    if (pool_blocks) *pool_blocks = hostcuda::g_pool_blocks.load();
    return hostcuda::g_spread_launches.load();
}
