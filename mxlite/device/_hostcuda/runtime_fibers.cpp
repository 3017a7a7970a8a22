// runtime_fibers.cpp: the fiber scheduler behind cuda_host.h (compiled into every module of the
// emulated GPUs; CPU devices' modules use runtime_serial.cpp).
//
// A launch runs the blocks of the grid one after another, in a seeded shuffled order. The
// threads of a block are fibers on one OS thread, each with its own 64 KiB stack (a pool reused
// by every launch, with a guard page under each stack). A fiber runs until it reaches a
// synchronisation point (__syncthreads*, a warp shuffle/vote, __syncwarp) or returns; then the
// scheduler resumes the next runnable fiber. When none is runnable it completes what can be
// completed (the block barrier once every thread of the block waits at it; each warp group
// whose live lanes all wait at the same warp operation) and starts a new round, resuming the
// released fibers in a freshly shuffled order. When nothing can be completed the launch fails
// with a description of who waits where: a barrier that can never complete raises in Python
// instead of hanging.
//
// Errors never crash the process when avoidable: deadlocks, __trap(), C++ exceptions escaping
// a kernel, and SIGSEGV/SIGBUS/SIGFPE raised by kernel code (a bad pointer, a stack overflow into
// a guard page, an integer division by zero) end the launch with an error code and a message.
// One launch at a time per module (a mutex); the launch function releases nothing it did not
// take, and leaves MXCSR (x86: round to nearest, no FTZ/DAZ during the launch) as it found it.
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#if defined(__x86_64__) && !defined(HOSTCUDA_USE_UCONTEXT)
#define HOSTCUDA_ASM_SWITCH 1
#include <xmmintrin.h>
#else
#include <ucontext.h>
#endif

#ifdef HOSTCUDA_ASM_SWITCH
extern "C" void hostcuda_ctx_switch(void **save, void *load);
#endif

namespace hostcuda {

uint3 g_thread_idx;
uint3 g_block_idx;
dim3 g_block_dim;
dim3 g_grid_dim;

namespace {

constexpr size_t kStackBytes = 64 * 1024;  // per CUDA thread
constexpr size_t kGuardBytes = 4096;
constexpr unsigned kMaxThreads = 1024;
constexpr size_t kMaxDynamicShared = 48 * 1024;

enum ErrorCode : int { kOk = 0, kDeadlock = 1, kSignal = 2, kException = 3, kBadConfig = 4, kTrap = 5, kMisuse = 6 };
enum FiberState : int { kRunnable = 0, kWaitBlock = 1, kWaitWarp = 2, kDone = 3 };

const char *const kWarpOpNames[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                    "__syncwarp", "__ballot_sync", "__any_sync", "__all_sync"};
const char *const kBlockOpNames[] = {"__syncthreads", "__syncthreads_count", "__syncthreads_and",
                                     "__syncthreads_or"};

#ifdef HOSTCUDA_ASM_SWITCH
// hostcuda_ctx_switch(save, load) (declared above): pushes the callee-saved registers, x87
// control word and MXCSR, stores the stack pointer in *save, switches to `load` and pops the
// same from there.
asm(R"(
    .text
    .p2align 4
    .hidden hostcuda_ctx_switch
    .type hostcuda_ctx_switch, @function
hostcuda_ctx_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $16, %rsp
    stmxcsr 8(%rsp)
    fnstcw (%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    fldcw (%rsp)
    ldmxcsr 8(%rsp)
    addq $16, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size hostcuda_ctx_switch, .-hostcuda_ctx_switch
)");
#endif

struct Fiber {
#ifdef HOSTCUDA_ASM_SWITCH
    void *sp = nullptr;
#else
    ucontext_t uc;
#endif
    unsigned linear = 0;  // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
    uint3 tid{0, 0, 0};
    int state = kDone;
    // The synchronisation point this fiber waits at.
    const char *file = "";
    int line = 0;
    int op = 0;
    unsigned mask = 0;
    unsigned long long value = 0;
    int param = 0;
    int width = 32;
    unsigned long long result = 0;
};

struct Launch {
    std::mutex mutex;
    // Stack pool: kMaxThreads stacks, each above a guard page, mapped once (lazily committed).
    char *pool = nullptr;
    std::vector<Fiber> fibers;
    std::vector<unsigned> runnable, batch;
    std::vector<char> shared_store;
    char *shared = nullptr;
    size_t shared_bytes = 0;
    // This launch.
    const char *kernel = "";
    Invoke invoke = nullptr;
    void (*fn)() = nullptr;
    void **args = nullptr;
    unsigned nthreads = 0;
    Fiber *current = nullptr;
#ifdef HOSTCUDA_ASM_SWITCH
    void *sched_sp = nullptr;
#else
    ucontext_t sched_uc;
#endif
    unsigned long long rng = 0;
    int error = kOk;
    std::string message;
    // Signals.
    sigjmp_buf jump;
    volatile sig_atomic_t in_launch = 0;
    volatile int fault_signal = 0;
    void *volatile fault_addr = nullptr;
    struct sigaction old_segv, old_bus, old_fpe;
    stack_t old_altstack;
    std::vector<char> altstack;
};

Launch L;

unsigned long long next_random() {  // splitmix64
    unsigned long long z = (L.rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

template <class T> void shuffle(std::vector<T> &v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[next_random() % i]);
}

void fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void fail(int code, const char *fmt, ...) {
    if (L.error != kOk) return;  // keep the first error
    char buf[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    L.error = code;
    L.message = buf;
}

std::string where() {
    char buf[256];
    snprintf(buf, sizeof buf, "kernel '%s', block (%u,%u,%u) of grid (%u,%u,%u), block size (%u,%u,%u)", L.kernel,
             g_block_idx.x, g_block_idx.y, g_block_idx.z, g_grid_dim.x, g_grid_dim.y, g_grid_dim.z, g_block_dim.x,
             g_block_dim.y, g_block_dim.z);
    return buf;
}

std::string thread_name(const Fiber &f) {
    char buf[96];
    snprintf(buf, sizeof buf, "thread %u (threadIdx (%u,%u,%u))", f.linear, f.tid.x, f.tid.y, f.tid.z);
    return buf;
}

// "0-31, 64, 66-70" from sorted linear thread ids.
std::string ranges(const std::vector<unsigned> &ids) {
    std::string out;
    for (size_t i = 0; i < ids.size();) {
        size_t j = i;
        while (j + 1 < ids.size() && ids[j + 1] == ids[j] + 1) ++j;
        if (!out.empty()) out += ", ";
        out += std::to_string(ids[i]);
        if (j > i) out += "-" + std::to_string(ids[j]);
        i = j + 1;
    }
    return out;
}

// ---- fibers ---------------------------------------------------------------------------------
void switch_to_scheduler() {
    Fiber *f = L.current;
#ifdef HOSTCUDA_ASM_SWITCH
    hostcuda_ctx_switch(&f->sp, L.sched_sp);
#else
    swapcontext(&f->uc, &L.sched_uc);
#endif
}

void fiber_main() {
    try {
        L.invoke(L.fn, L.args);
    } catch (const std::exception &e) {
        fail(kException, "%s: C++ exception in %s: %s", where().c_str(), thread_name(*L.current).c_str(), e.what());
    } catch (...) {
        fail(kException, "%s: unknown C++ exception in %s", where().c_str(), thread_name(*L.current).c_str());
    }
    L.current->state = kDone;
    switch_to_scheduler();
    abort();  // a finished fiber is never resumed
}

bool ensure_pool() {
    if (L.pool) return true;
    const size_t total = kMaxThreads * (kStackBytes + kGuardBytes);
    void *p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return false;
    L.pool = static_cast<char *>(p);
    for (unsigned i = 0; i < kMaxThreads; ++i) mprotect(L.pool + i * (kStackBytes + kGuardBytes), kGuardBytes, PROT_NONE);
    L.fibers.resize(kMaxThreads);
    return true;
}

char *stack_low(unsigned i) { return L.pool + i * (kStackBytes + kGuardBytes) + kGuardBytes; }

void start_fiber(Fiber &f, unsigned i) {
    char *lo = stack_low(i);
#ifdef HOSTCUDA_ASM_SWITCH
    // Frame popped by hostcuda_ctx_switch: fpu cw, mxcsr, r15 r14 r13 r12 rbx rbp, return
    // address (fiber_main), then a null return address for fiber_main (rsp % 16 == 8 at entry).
    auto top = reinterpret_cast<uintptr_t>(lo + kStackBytes) & ~uintptr_t(15);
    auto *frame = reinterpret_cast<unsigned long long *>(top - 80);
    frame[0] = 0x037f;  // x87 control word (low 16 bits)
    frame[1] = 0x1f80;  // MXCSR: all exceptions masked, round to nearest, no FTZ/DAZ
    for (int k = 2; k < 8; ++k) frame[k] = 0;
    frame[8] = reinterpret_cast<unsigned long long>(&fiber_main);
    frame[9] = 0;
    f.sp = frame;
#else
    getcontext(&f.uc);
    f.uc.uc_stack.ss_sp = lo;
    f.uc.uc_stack.ss_size = kStackBytes;
    f.uc.uc_link = nullptr;
    makecontext(&f.uc, &fiber_main, 0);
#endif
    f.state = kRunnable;
}

void resume(Fiber &f) {
    L.current = &f;
    g_thread_idx = f.tid;
#ifdef HOSTCUDA_ASM_SWITCH
    hostcuda_ctx_switch(&L.sched_sp, f.sp);
#else
    swapcontext(&L.sched_uc, &f.uc);
#endif
    L.current = nullptr;
}

// ---- completing synchronisation points ---------------------------------------------------------
unsigned warp_live_mask(unsigned warp) {
    unsigned live = 0;
    for (unsigned lane = 0; lane < 32; ++lane) {
        const unsigned t = warp * 32 + lane;
        if (t < L.nthreads && L.fibers[t].state != kDone) live |= 1u << lane;
    }
    return live;
}

unsigned long long warp_result(const Fiber &f, unsigned group, unsigned base) {
    const unsigned lane = f.linear & 31;
    const unsigned w = (unsigned)f.width;
    const unsigned seg = lane & ~(w - 1);
    long src = -1;
    switch (f.op) {
        case kShflIdx: src = seg + ((unsigned)f.param & (w - 1)); break;
        case kShflUp: src = (long)lane - f.param < (long)seg ? (long)lane : (long)lane - f.param; break;
        case kShflDown: src = (long)lane + f.param >= (long)(seg + w) ? (long)lane : (long)lane + f.param; break;
        case kShflXor: {
            const long s = (long)(lane ^ (unsigned)f.param);
            src = s >= (long)(seg + w) || s < (long)seg ? (long)lane : s;
            break;
        }
        case kBallot:
        case kAny:
        case kAll: {
            unsigned ballot = 0;
            for (unsigned l = 0; l < 32; ++l)
                if ((group >> l) & 1u && L.fibers[base + l].value) ballot |= 1u << l;
            if (f.op == kBallot) return ballot;
            if (f.op == kAny) return ballot != 0;
            return ballot == group;
        }
        default: return 0;
    }
    // Reading a lane that does not take part is undefined on the GPU: the caller's own value.
    if (!((group >> src) & 1u)) return f.value;
    return L.fibers[base + (unsigned)src].value;
}

// Releases every complete warp group; returns how many fibers it released.
unsigned resolve_warps() {
    unsigned released = 0;
    const unsigned warps = (L.nthreads + 31) / 32;
    for (unsigned w = 0; w < warps; ++w) {
        const unsigned base = w * 32;
        unsigned waiting = 0;
        for (unsigned lane = 0; lane < 32 && base + lane < L.nthreads; ++lane)
            if (L.fibers[base + lane].state == kWaitWarp) waiting |= 1u << lane;
        if (!waiting) continue;
        const unsigned live = warp_live_mask(w);
        unsigned complete = 0;
        for (unsigned lane = 0; lane < 32; ++lane) {
            if (!((waiting >> lane) & 1u) || ((complete >> lane) & 1u)) continue;
            const Fiber &f = L.fibers[base + lane];
            const unsigned group = (f.mask | (1u << lane)) & live;
            bool ok = (group & ~waiting) == 0;
            for (unsigned l = 0; ok && l < 32; ++l) {
                if (!((group >> l) & 1u)) continue;
                const Fiber &g = L.fibers[base + l];
                ok = g.op == f.op && g.mask == f.mask;
            }
            if (ok) complete |= group;
        }
        if (!complete) continue;
        for (unsigned lane = 0; lane < 32; ++lane) {
            if (!((complete >> lane) & 1u)) continue;
            Fiber &f = L.fibers[base + lane];
            f.result = warp_result(f, (f.mask | (1u << lane)) & live, base);
        }
        for (unsigned lane = 0; lane < 32; ++lane) {
            if (!((complete >> lane) & 1u)) continue;
            L.fibers[base + lane].state = kRunnable;
            L.runnable.push_back(base + lane);
            ++released;
        }
    }
    return released;
}

bool same_site(const Fiber &a, const Fiber &b) {
    return a.line == b.line && (a.file == b.file || strcmp(a.file, b.file) == 0);
}

// Releases the block barrier when every thread of the block waits at it.
unsigned resolve_block() {
    unsigned at_barrier = 0;
    for (unsigned t = 0; t < L.nthreads; ++t) at_barrier += L.fibers[t].state == kWaitBlock;
    if (at_barrier != L.nthreads) return 0;
    const Fiber &first = L.fibers[0];
    for (unsigned t = 1; t < L.nthreads; ++t) {
        const Fiber &f = L.fibers[t];
        if (!same_site(f, first) || f.op != first.op) {
            fail(kDeadlock,
                 "%s: threads wait at different barriers: %s at %s (%s:%d), %s at %s (%s:%d) (undefined on a GPU)",
                 where().c_str(), thread_name(first).c_str(), kBlockOpNames[first.op], first.file, first.line,
                 thread_name(f).c_str(), kBlockOpNames[f.op], f.file, f.line);
            return 0;
        }
    }
    unsigned long long count = 0;
    for (unsigned t = 0; t < L.nthreads; ++t) count += L.fibers[t].value != 0;
    unsigned long long result = 0;
    switch (first.op) {
        case kBarrierCount: result = count; break;
        case kBarrierAnd: result = count == L.nthreads; break;
        case kBarrierOr: result = count != 0; break;
        default: break;
    }
    for (unsigned t = 0; t < L.nthreads; ++t) {
        L.fibers[t].result = result;
        L.fibers[t].state = kRunnable;
        L.runnable.push_back(t);
    }
    return L.nthreads;
}

void report_deadlock() {
    std::string text = where() + ": no thread can make progress (a barrier or warp operation that can never "
                                 "complete). Threads (linear ids):";
    std::vector<unsigned> exited;
    std::vector<bool> listed(L.nthreads, false);
    for (unsigned t = 0; t < L.nthreads; ++t)
        if (L.fibers[t].state == kDone) exited.push_back(t);
    for (unsigned t = 0; t < L.nthreads; ++t) {
        const Fiber &f = L.fibers[t];
        if (listed[t] || f.state == kDone) continue;
        std::vector<unsigned> same;
        for (unsigned u = t; u < L.nthreads; ++u) {
            const Fiber &g = L.fibers[u];
            if (listed[u] || g.state != f.state || g.op != f.op || !same_site(f, g)) continue;
            if (f.state == kWaitWarp && g.mask != f.mask) continue;
            same.push_back(u);
            listed[u] = true;
        }
        char buf[320];
        if (f.state == kWaitBlock) {
            snprintf(buf, sizeof buf, "\n  %s: waiting at %s() (%s:%d)", ranges(same).c_str(), kBlockOpNames[f.op],
                     f.file, f.line);
        } else {
            snprintf(buf, sizeof buf, "\n  %s: waiting at %s(mask 0x%08x) (%s:%d) in warp(s) %s", ranges(same).c_str(),
                     kWarpOpNames[f.op], f.mask, f.file, f.line,
                     ranges([&] {
                         std::vector<unsigned> w;
                         for (unsigned u : same)
                             if (w.empty() || w.back() != u / 32) w.push_back(u / 32);
                         return w;
                     }()).c_str());
        }
        text += buf;
    }
    if (!exited.empty()) text += "\n  " + ranges(exited) + ": exited";
    fail(kDeadlock, "%s", text.c_str());
}

// ---- signals -------------------------------------------------------------------------------------
void on_signal(int sig, siginfo_t *info, void *) {
    if (!L.in_launch) {  // not ours: put the previous handler back and let the fault happen again
        sigaction(sig, sig == SIGSEGV ? &L.old_segv : sig == SIGBUS ? &L.old_bus : &L.old_fpe, nullptr);
        return;
    }
    L.fault_signal = sig;
    L.fault_addr = info ? info->si_addr : nullptr;
    siglongjmp(L.jump, 1);
}

void install_signals() {
    if (L.altstack.empty()) L.altstack.resize(64 * 1024);
    stack_t ss{};
    ss.ss_sp = L.altstack.data();
    ss.ss_size = L.altstack.size();
    sigaltstack(&ss, &L.old_altstack);
    struct sigaction sa {};
    sa.sa_sigaction = &on_signal;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGSEGV, &sa, &L.old_segv);
    sigaction(SIGBUS, &sa, &L.old_bus);
    sigaction(SIGFPE, &sa, &L.old_fpe);
}

void restore_signals() {
    sigaction(SIGSEGV, &L.old_segv, nullptr);
    sigaction(SIGBUS, &L.old_bus, nullptr);
    sigaction(SIGFPE, &L.old_fpe, nullptr);
    sigaltstack(&L.old_altstack, nullptr);
}

void describe_fault() {
    const char *what = L.fault_signal == SIGSEGV ? "SIGSEGV (invalid memory access)"
                       : L.fault_signal == SIGBUS ? "SIGBUS (misaligned or invalid memory access)"
                                                  : "SIGFPE (integer division by zero or overflow)";
    std::string who = L.current ? thread_name(*L.current) : std::string("the scheduler");
    auto addr = reinterpret_cast<uintptr_t>(L.fault_addr);
    auto pool = reinterpret_cast<uintptr_t>(L.pool);
    const size_t slot = kStackBytes + kGuardBytes;
    if (L.fault_signal != SIGFPE && addr >= pool && addr < pool + kMaxThreads * slot && (addr - pool) % slot < kGuardBytes) {
        fail(kSignal, "%s: %s overflowed its %zu KiB stack (host emulation limit)", where().c_str(), who.c_str(),
             kStackBytes / 1024);
    } else {
        fail(kSignal, "%s: %s in %s at address %p", where().c_str(), what, who.c_str(), L.fault_addr);
    }
}

// ---- one block -------------------------------------------------------------------------------------
bool run_block() {
    L.runnable.clear();
    for (unsigned t = 0; t < L.nthreads; ++t) {
        Fiber &f = L.fibers[t];
        f.linear = t;
        f.tid = uint3{t % g_block_dim.x, (t / g_block_dim.x) % g_block_dim.y, t / (g_block_dim.x * g_block_dim.y)};
        start_fiber(f, t);
        L.runnable.push_back(t);
    }
    if (L.shared_bytes) memset(L.shared, 0xff, L.shared_bytes);  // poison: uninitialised reads show
    unsigned done = 0;
    for (;;) {
        if (L.runnable.empty()) {
            if (done == L.nthreads) return true;
            unsigned released = resolve_warps();
            if (L.error == kOk && !released) released = resolve_block();
            if (L.error != kOk) return false;
            if (!released) {
                report_deadlock();
                return false;
            }
            continue;
        }
        shuffle(L.runnable);
        L.batch.swap(L.runnable);
        L.runnable.clear();
        for (unsigned t : L.batch) {
            Fiber &f = L.fibers[t];
            resume(f);
            if (L.error != kOk) return false;
            if (f.state == kDone) ++done;
        }
    }
}

int finish(char *err, size_t err_len) {
    if (err && err_len) snprintf(err, err_len, "%s", L.message.c_str());
    return L.error;
}

}  // namespace

// ---- calls from kernel code ------------------------------------------------------------------------
int block_op(int kind, int pred, const char *file, int line) {
    Fiber *f = L.current;
    if (!f) trap("__syncthreads outside a kernel launch", file, line);
    f->state = kWaitBlock;
    f->op = kind;
    f->value = (unsigned long long)pred;
    f->file = file;
    f->line = line;
    switch_to_scheduler();
    return (int)f->result;
}

unsigned long long warp_op(int kind, unsigned mask, unsigned long long value, int param, int width,
                           const char *file, int line) {
    Fiber *f = L.current;
    if (!f) trap("warp operation outside a kernel launch", file, line);
    if (width < 1 || width > 32 || (width & (width - 1))) {
        char buf[160];
        snprintf(buf, sizeof buf, "%s with width %d (must be a power of 2 in 1..32)", kWarpOpNames[kind], width);
        std::string text = buf;
        fail(kMisuse, "%s: %s: %s (%s:%d)", where().c_str(), thread_name(*f).c_str(), text.c_str(), file, line);
        f->state = kDone;
        switch_to_scheduler();
    }
    f->state = kWaitWarp;
    f->op = kind;
    f->mask = mask;
    f->value = value;
    f->param = param;
    f->width = width;
    f->file = file;
    f->line = line;
    switch_to_scheduler();
    return f->result;
}

void *dynamic_shared() { return L.shared; }
unsigned lane_id() { return L.current ? L.current->linear & 31 : 0; }
unsigned warp_id() { return L.current ? L.current->linear / 32 : 0; }
unsigned active_mask() { return L.current ? warp_live_mask(L.current->linear / 32) : 0; }
long long clock_ticks() {
    return (long long)std::chrono::steady_clock::now().time_since_epoch().count();
}

void trap(const char *what, const char *file, int line) {
    if (!L.current) {
        fprintf(stderr, "hostcuda: %s (%s:%d) outside a launch\n", what, file, line);
        abort();
    }
    fail(kTrap, "%s: %s executed %s (%s:%d)", where().c_str(), thread_name(*L.current).c_str(), what, file, line);
    L.current->state = kDone;
    switch_to_scheduler();
    abort();
}

int run_launch(const char *kernel, Invoke invoke, void (*fn)(), void **args, const unsigned *grid,
               const unsigned *block, unsigned long long shared_mem, unsigned long long seed, char *err,
               size_t err_len) {
    std::lock_guard<std::mutex> lock(L.mutex);
    L.error = kOk;
    L.message.clear();
    L.kernel = kernel;
    const unsigned long long nthreads = (unsigned long long)block[0] * block[1] * block[2];
    const unsigned long long nblocks = (unsigned long long)grid[0] * grid[1] * grid[2];
    if (nthreads == 0 || nthreads > kMaxThreads || nblocks == 0 || block[2] > 64 || grid[1] > 65535 ||
        grid[2] > 65535 || grid[0] > 0x7fffffffu) {
        fail(kBadConfig, "kernel '%s': invalid launch configuration grid (%u,%u,%u) block (%u,%u,%u)", kernel,
             grid[0], grid[1], grid[2], block[0], block[1], block[2]);
        return finish(err, err_len);
    }
    if (shared_mem > kMaxDynamicShared) {
        fail(kBadConfig, "kernel '%s': %llu bytes of dynamic shared memory requested, at most %zu", kernel,
             shared_mem, kMaxDynamicShared);
        return finish(err, err_len);
    }
    if (!ensure_pool()) {
        fail(kBadConfig, "kernel '%s': cannot map the fiber stacks", kernel);
        return finish(err, err_len);
    }
    L.invoke = invoke;
    L.fn = fn;
    L.args = args;
    L.nthreads = (unsigned)nthreads;
    L.rng = seed;
    L.shared_bytes = (size_t)shared_mem;
    if (L.shared_store.size() < L.shared_bytes + 128) L.shared_store.resize(L.shared_bytes + 128);
    L.shared = reinterpret_cast<char *>((reinterpret_cast<uintptr_t>(L.shared_store.data()) + 127) & ~uintptr_t(127));
    g_grid_dim = dim3(grid[0], grid[1], grid[2]);
    g_block_dim = dim3(block[0], block[1], block[2]);

    // Block order: a shuffled permutation (a random rotation and stride for huge grids).
    std::vector<unsigned> order;
    unsigned long long start = 0, stride = 1;
    if (nblocks <= (1ull << 22)) {
        order.resize(nblocks);
        for (unsigned i = 0; i < nblocks; ++i) order[i] = i;
        shuffle(order);
    } else {
        start = next_random() % nblocks;
        do stride = next_random() % nblocks; while (stride == 0 || std::gcd(stride, nblocks) != 1);
    }
#ifdef HOSTCUDA_ASM_SWITCH
    const unsigned int saved_csr = _mm_getcsr();
    _mm_setcsr(0x1f80);
#endif
    install_signals();
    L.current = nullptr;
    if (sigsetjmp(L.jump, 1) == 0) {
        L.in_launch = 1;
        for (unsigned long long i = 0; i < nblocks; ++i) {
            const unsigned long long b = order.empty() ? (start + i * stride) % nblocks : order[i];
            g_block_idx = uint3{(unsigned)(b % grid[0]), (unsigned)((b / grid[0]) % grid[1]),
                                (unsigned)(b / ((unsigned long long)grid[0] * grid[1]))};
            if (!run_block()) break;
        }
    } else {
        describe_fault();
    }
    L.in_launch = 0;
    L.current = nullptr;
    restore_signals();
#ifdef HOSTCUDA_ASM_SWITCH
    _mm_setcsr(saved_csr);
#endif
    return finish(err, err_len);
}

}  // namespace hostcuda
