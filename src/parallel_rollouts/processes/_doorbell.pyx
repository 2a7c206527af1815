"""Step requests and replies as counters in shared memory, waited on in compiled code.

The segment holds one 64-byte header line and one 64-byte slot per worker, each a few
32-bit words (an int64 argument at byte 24 of a slot):

    header: completions (bumped by every reply; the main process sleeps on it), main_sleeping
    slot:   requests, replies, command, reply_kind, worker_sleeping, -, argument (int64)

The main process writes a slot's command and argument, then bumps its ``requests``
counter; the worker serves the request, writes ``reply_kind``, sets ``replies`` to the
request's number and bumps ``completions``. Each side spins briefly, then sleeps in the
kernel (``doorbell_wait.h``); a wake-up costs a system call only when the peer sleeps.
Counters wrap at 2**31 (the waits compare for equality).
"""

from libc.stdint cimport int32_t, int64_t

cdef extern from "doorbell_wait.h" nogil:
    int DOORBELL_AVAILABLE
    int32_t doorbell_load(int32_t *word)
    void doorbell_store(int32_t *word, int32_t value)
    int32_t doorbell_add(int32_t *word, int32_t value)
    void doorbell_wake(int32_t *word)
    int doorbell_wait(int32_t *futex_word, int32_t *sleeping, int32_t *done_word, int32_t done_value,
                      int differs, double spin_seconds, double timeout_seconds)

#: Whether this platform has the kernel wait (Linux); elsewhere the pipes carry every step.
AVAILABLE = bool(DOORBELL_AVAILABLE)
#: Bytes per line: one for the header, one per worker (a cache line each, no false sharing).
LINE_BYTES = 64

cdef enum:
    WORDS_PER_LINE = 16
    COMPLETIONS = 0
    MAIN_SLEEPING = 1
    REQUESTS = 0
    REPLIES = 1
    COMMAND = 2
    REPLY_KIND = 3
    WORKER_SLEEPING = 4
    ARGUMENT = 6


def segment_bytes(int slots):
    """The size of a doorbell segment for ``slots`` workers."""
    return LINE_BYTES * (slots + 1)


cdef inline int32_t next_number(int32_t number) nogil:
    return 1 if number >= 2147483647 else number + 1


cdef class Doorbells:
    """The doorbells of a pool's workers, on a writable buffer of :func:`segment_bytes` bytes.

    Each method names the worker by its slot. The main process calls :meth:`ring`,
    :meth:`wait_reply` and :meth:`reply_kind`; a worker calls :meth:`wait_request`,
    :meth:`request` and :meth:`reply` on its own slot.
    """

    cdef int32_t *base
    cdef object buffer
    cdef readonly int slots

    def __cinit__(self, buffer, int slots):
        cdef unsigned char[::1] view = buffer
        if slots < 0 or view.shape[0] < segment_bytes(slots):
            raise ValueError(f"a doorbell segment for {slots} workers needs {segment_bytes(slots)} bytes; got {view.shape[0]}.")
        self.buffer = view
        self.base = <int32_t *> &view[0]
        self.slots = slots

    cdef inline int32_t *line(self, int slot) except NULL:
        if slot < 0 or slot >= self.slots:
            raise IndexError(f"doorbell slot {slot} out of range 0..{self.slots - 1}")
        return self.base + WORDS_PER_LINE * (slot + 1)

    def clear(self, int slot):
        """Zero a slot before a new worker takes it over (its predecessor is stopped)."""
        cdef int32_t *line = self.line(slot)
        cdef int word
        for word in range(WORDS_PER_LINE):
            doorbell_store(&line[word], 0)

    # -- the main process ------------------------------------------------------------------

    def ring(self, int slot, int command, int64_t argument):
        """Post request ``command`` with ``argument`` to ``slot``; its number (the reply to await)."""
        cdef int32_t *line = self.line(slot)
        cdef int32_t number = next_number(doorbell_load(&line[REQUESTS]))
        (<int64_t *> &line[ARGUMENT])[0] = argument
        line[COMMAND] = command
        doorbell_store(&line[REQUESTS], number)
        if doorbell_load(&line[WORKER_SLEEPING]):
            doorbell_wake(&line[REQUESTS])
        return number

    def replied(self, int slot, int32_t number):
        """Whether request ``number`` of ``slot`` has its reply (no waiting)."""
        return doorbell_load(&self.line(slot)[REPLIES]) == number

    def wait_reply(self, int slot, int32_t number, double spin_seconds, double timeout_seconds):
        """Wait for the reply to request ``number``: 1 once it is there, 0 on time-out, -1 if a
        signal interrupted the wait (let Python run its handlers, then wait again)."""
        cdef int32_t *line = self.line(slot)
        cdef int result
        with nogil:
            result = doorbell_wait(&self.base[COMPLETIONS], &self.base[MAIN_SLEEPING], &line[REPLIES], number, 0,
                                   spin_seconds, timeout_seconds)
        return result

    def completions(self):
        """How many replies the workers have posted (wrapping); see :meth:`wait_completion`."""
        return doorbell_load(&self.base[COMPLETIONS])

    def wait_completion(self, int32_t seen, double spin_seconds, double timeout_seconds):
        """Wait until some worker replies after :meth:`completions` read ``seen``: 1, 0 or -1
        as :meth:`wait_reply`."""
        cdef int result
        with nogil:
            result = doorbell_wait(&self.base[COMPLETIONS], &self.base[MAIN_SLEEPING], &self.base[COMPLETIONS], seen, 1,
                                   spin_seconds, timeout_seconds)
        return result

    def reply_kind(self, int slot):
        return self.line(slot)[REPLY_KIND]

    # -- a worker --------------------------------------------------------------------------

    def wait_request(self, int slot, int32_t served, double spin_seconds, double timeout_seconds):
        """Wait for a request after number ``served`` (the newest one counts: a request the main
        process gave up on before this worker saw it is skipped): 1, 0 or -1 as :meth:`wait_reply`."""
        cdef int32_t *line = self.line(slot)
        cdef int result
        with nogil:
            result = doorbell_wait(&line[REQUESTS], &line[WORKER_SLEEPING], &line[REQUESTS], served, 1,
                                   spin_seconds, timeout_seconds)
        return result

    def request(self, int slot):
        """``(number, command, argument)`` of the request posted last to ``slot``."""
        cdef int32_t *line = self.line(slot)
        cdef int32_t number = doorbell_load(&line[REQUESTS])
        return number, line[COMMAND], (<int64_t *> &line[ARGUMENT])[0]

    def reply(self, int slot, int32_t number, int kind):
        """Answer request ``number`` with ``kind`` and wake the main process if it sleeps."""
        cdef int32_t *line = self.line(slot)
        line[REPLY_KIND] = kind
        doorbell_store(&line[REPLIES], number)
        doorbell_add(&self.base[COMPLETIONS], 1)
        if doorbell_load(&self.base[MAIN_SLEEPING]):
            doorbell_wake(&self.base[COMPLETIONS])
