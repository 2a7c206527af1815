/* Waiting on a 32-bit counter in shared memory: a short spin, then the kernel.
 *
 * Linux: a futex on the counter itself (a shared, not private, futex: the word lives in
 * a segment mapped by several processes). Elsewhere DOORBELL_AVAILABLE is 0 and the
 * package steps over its pipes instead; these functions are then never called.
 *
 * The sleeper/waker handshake: a waiter sets its `sleeping` word, checks the counter
 * once more, then sleeps only while the counter still holds the value it saw (the
 * kernel checks that atomically). A waker stores the counter, then wakes only if the
 * `sleeping` word is set. Both sides use sequentially consistent operations, so either
 * the waiter sees the new value or the waker sees the sleeper: no wake-up is lost, and
 * a step whose peer is spinning costs no system call.
 */
#ifndef PARALLEL_ROLLOUTS_DOORBELL_WAIT_H
#define PARALLEL_ROLLOUTS_DOORBELL_WAIT_H

#include <stdint.h>
#include <time.h>

#if defined(__linux__)
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#define DOORBELL_AVAILABLE 1
#else
#define DOORBELL_AVAILABLE 0
#endif

static inline int32_t doorbell_load(int32_t *word) { return __atomic_load_n(word, __ATOMIC_SEQ_CST); }
static inline void doorbell_store(int32_t *word, int32_t value) { __atomic_store_n(word, value, __ATOMIC_SEQ_CST); }
static inline int32_t doorbell_add(int32_t *word, int32_t value) { return __atomic_add_fetch(word, value, __ATOMIC_SEQ_CST); }

static inline void doorbell_cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static inline double doorbell_now(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

#if DOORBELL_AVAILABLE
static inline void doorbell_wake(int32_t *word) {
    syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Wait until *done_word == done_value (with `differs`: until *done_word != done_value).
 *
 * `futex_word` is the counter slept on (it changes whenever the awaited event may have
 * happened); `sleeping` is the waiter's flag. Spins for `spin_seconds` (yielding the CPU
 * every few turns, so that a process with work to do gets the core), then sleeps for at
 * most `timeout_seconds` in all. Returns 1 once the condition holds, 0 on time-out, -1 when
 * a signal interrupted the sleep (the caller lets Python run its handlers, then waits again).
 */
static inline int doorbell_wait(int32_t *futex_word, int32_t *sleeping, int32_t *done_word, int32_t done_value,
                                int differs, double spin_seconds, double timeout_seconds) {
#define DOORBELL_DONE() ((doorbell_load(done_word) == done_value) != (differs != 0))
    double start = doorbell_now();
    double spin_until = start + spin_seconds;
    double deadline = start + timeout_seconds;
    int spinning = spin_seconds > 0.0;
    unsigned turns = 0;
    for (;;) {
        int32_t seen = doorbell_load(futex_word);
        if (DOORBELL_DONE()) return 1;
        if (spinning) {
            doorbell_cpu_relax();
            if ((++turns & 31u) == 0) {
                sched_yield();
                spinning = doorbell_now() < spin_until;
            }
            continue;
        }
        double now = doorbell_now();
        if (now >= deadline) return 0;
        doorbell_store(sleeping, 1);
        if (DOORBELL_DONE()) {
            doorbell_store(sleeping, 0);
            return 1;
        }
        double remaining = deadline - now;
        struct timespec timeout;
        timeout.tv_sec = (time_t)remaining;
        timeout.tv_nsec = (long)((remaining - (double)timeout.tv_sec) * 1e9);
        long result = syscall(SYS_futex, futex_word, FUTEX_WAIT, seen, &timeout, NULL, 0);
        int interrupted = result == -1 && errno == EINTR;
        doorbell_store(sleeping, 0);
        if (interrupted && !DOORBELL_DONE()) return -1;
    }
#undef DOORBELL_DONE
}
#else
static inline void doorbell_wake(int32_t *word) { (void)word; }
static inline int doorbell_wait(int32_t *futex_word, int32_t *sleeping, int32_t *done_word, int32_t done_value,
                                int differs, double spin_seconds, double timeout_seconds) {
    (void)futex_word; (void)sleeping; (void)done_word; (void)done_value; (void)differs;
    (void)spin_seconds; (void)timeout_seconds;
    return 0;
}
#endif

#endif
