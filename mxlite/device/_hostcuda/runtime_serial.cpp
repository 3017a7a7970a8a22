// runtime_serial.cpp: the serial runtime behind cuda_host.h, for CPU devices (HOSTCUDA_SERIAL).
//
// A serial module runs a kernel with ONE thread per block: cuda_host.h makes threadIdx (0,0,0)
// and blockDim (1,1,1) compile-time constants, so a kernel's `for (i = begin + threadIdx.x; i <
// end; i += blockDim.x)` becomes a plain unit-stride loop that g++ vectorises, and the blocks of
// the grid run one after another, in order, on the calling thread. No fibers, no signal handlers:
// this is the production CPU path of the fused optimizer updates, not the emulation (that is
// runtime_fibers.cpp, with real block sizes, shuffled schedules and the checks that come with them).
//
// In a one-thread block a barrier completes at once (the __syncthreads_count/and/or forms return
// the thread's own predicate) and a warp has one live lane: warp operations whose mask is exactly
// lane 0 return what CUDA returns for a lone lane (a shuffle gives back the lane's own value), any
// other mask names lanes that do not exist and fails the launch. __trap() and C++ exceptions fail
// the launch with a message; a bad pointer is an ordinary crash, as for any native code.
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>

#include <chrono>
#include <exception>
#include <mutex>
#include <string>

#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

namespace hostcuda {

uint3 g_thread_idx;  // unused by serial kernels (threadIdx is a constant); defined for the shared header
uint3 g_block_idx;
dim3 g_block_dim;
dim3 g_grid_dim;

namespace {

enum ErrorCode : int { kOk = 0, kException = 3, kBadConfig = 4, kTrap = 5, kMisuse = 6 };

const char *const kWarpOpNames[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                    "__syncwarp", "__ballot_sync", "__any_sync", "__all_sync"};

// Thrown by kernel-side failures (trap, misuse) and caught by run_launch.
struct LaunchFailure {
    int code;
    std::string message;
};

// One launch at a time per module: the block index is module state. A pointer, so that a child
// forked while another thread was inside a launch (the mutex held by a thread the child does not
// have) starts with a fresh one instead of hanging on its first launch; the old one is left alone.
std::mutex *g_launch_mutex = new std::mutex;
const char *g_kernel = "";
bool g_in_launch = false;

void reset_in_child() {
    g_launch_mutex = new std::mutex;
    g_in_launch = false;
}
const int g_atfork = pthread_atfork(nullptr, nullptr, reset_in_child);

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

int run_launch(const char *kernel, Invoke invoke, void (*fn)(), void **args, const unsigned *grid,
               const unsigned *block, unsigned long long shared_mem, unsigned long long, char *err, size_t err_len) {
    std::lock_guard<std::mutex> lock(*g_launch_mutex);
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
    g_kernel = kernel;
    g_grid_dim = dim3(grid[0], grid[1], grid[2]);
    g_block_dim = dim3(1, 1, 1);
    g_thread_idx = uint3{0, 0, 0};
#if defined(__x86_64__)
    // IEEE arithmetic whatever the caller left in MXCSR: round to nearest, subnormals kept (as the twins).
    const unsigned int saved_csr = _mm_getcsr();
    _mm_setcsr(0x1f80);
#endif
    int code = kOk;
    std::string message;
    g_in_launch = true;
    try {
        for (unsigned z = 0; z < grid[2]; ++z)
            for (unsigned y = 0; y < grid[1]; ++y)
                for (unsigned x = 0; x < grid[0]; ++x) {
                    g_block_idx = uint3{x, y, z};
                    invoke(fn, args);
                }
    } catch (const LaunchFailure &failure) {
        code = failure.code;
        message = failure.message;
    } catch (const std::exception &e) {
        code = kException;
        message = where() + ": C++ exception escaped the kernel: " + e.what();
    } catch (...) {
        code = kException;
        message = where() + ": a C++ exception escaped the kernel";
    }
    g_in_launch = false;
#if defined(__x86_64__)
    _mm_setcsr(saved_csr);
#endif
    return report(code, message, err, err_len);
}

}  // namespace hostcuda
