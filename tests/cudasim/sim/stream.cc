/*
 * stream: streams as queues, events, and the device thread that runs every
 * queued operation.
 *
 * The host only queues. One device thread per process takes, among the
 * streams whose next operation may start (its dependencies have completed),
 * one at random from a generator seeded by ZT_SIM_SEED, and runs it to
 * completion (a collective in flight is polled instead, so that other streams
 * go on meanwhile). Nothing but what CUDA guarantees orders two streams:
 * stream order, cudaStreamWaitEvent, the legacy default stream's implicit
 * synchronisation with blocking streams, and the host's synchronisations. So
 * a missing wait lets operations run in either order, as on a GPU.
 *
 * Each operation also gets a vector clock when it is queued: its stream's
 * clock joined with what the queuing host thread has observed (a host that
 * synchronised on stream A and then queues on B orders B after A), and
 * waits on events join the event's clock. These clocks, not the order the
 * operations happened to run in, are what the race checker compares
 * (racecheck.cc), so a missing wait is reported on every run.
 *
 * A device with a sticky error drops what is queued on it (a GPU after a
 * fault runs nothing more); events and waits still complete so that no host
 * thread waits forever.
 *
 * Handles are tagged indices (never dereferenced), so a stream handle passed
 * as an event, or a destroyed handle, is recognised.
 *
 * Memory: stream and event records live for the process; a queued operation
 * is owned by its stream until it completes. Thread safety: one lock
 * (zs_sched_lock) for everything here; operations run on the device thread
 * without it.
 */
#include "tests/cudasim/sim/zs_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <thread>

struct zs_stream {
    uint32_t index;
    int device;
    unsigned flags;
    bool legacy;
    bool destroyed = false;
    std::deque<std::unique_ptr<zs_op>> queue;
    uint64_t enqueued = 0, done = 0;
    bool busy = false; /* its head has started and not completed */
    zs_vc vc;
    std::vector<std::string> history; /* descriptions, by seq % kHistory */
};

namespace {

const size_t kHistory = 4096;
const uintptr_t kStreamTag = 0x5157000000ull; /* "Q": a stream index follows */
const uintptr_t kEventTag = 0x4576000000ull;  /* "Ev" */
const uintptr_t kTagMask = 0xffff000000ull;

struct zs_event_rec {
    int device;
    unsigned flags;
    bool destroyed = false;
    bool recorded = false;
    uint32_t stream = 0;
    uint64_t seq = 0;
    zs_vc vc;
    std::shared_ptr<double> when; /* set by the record operation when it runs */
};

struct sched {
    std::mutex lock;
    std::condition_variable work; /* the device thread waits for operations */
    std::condition_variable done; /* host threads wait for completions */
    std::vector<zs_stream *> streams;
    std::vector<zs_event_rec *> events;
    uint32_t legacy[ZS_MAX_DEVICES];
    uint64_t rng;
    bool started = false;
    /* ZT_SIM_STATS: the real choices made (more than one stream ready) and a
     * hash of what was picked, printed at exit, to tell seeds' orders apart. */
    std::atomic<uint64_t> choices{0}, order{0};
};

sched *g_sched;
thread_local zs_vc *t_host_vc;

sched &S()
{
    static std::once_flag once;
    std::call_once(once, [] {
        g_sched = new sched();
        g_sched->rng = zs_cfg().seed ^ 0x2545f4914f6cdd1dull;
        if (zs_cfg().stats)
            atexit([] {
                fprintf(stderr, "zt-sim: stats: device thread order %016llx over %llu choices\n",
                        (unsigned long long)g_sched->order.load(),
                        (unsigned long long)g_sched->choices.load());
            });
        for (int d = 0; d < zs_cfg().devices; d++) {
            zs_stream *s = new zs_stream();
            s->index = (uint32_t)g_sched->streams.size();
            s->device = d;
            s->flags = cudaStreamDefault;
            s->legacy = true;
            g_sched->legacy[d] = s->index;
            g_sched->streams.push_back(s);
        }
    });
    return *g_sched;
}

uint64_t next_random(uint64_t &x)
{
    x += 0x9e3779b97f4a7c15ull;
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

bool deps_done(const sched &g, const zs_op &op)
{
    for (const zs_dep &d : op.deps)
        if (g.streams[d.stream]->done < d.seq)
            return false;
    return true;
}

/* A stream whose head may start now, picked at random; NULL if none. */
zs_stream *pick(sched &g)
{
    zs_stream *ready[64];
    size_t n = 0, seen = 0;
    for (zs_stream *s : g.streams) {
        if (s->busy || s->queue.empty() || !deps_done(g, *s->queue.front()) ||
            !s->queue.front()->can_start())
            continue;
        /* Reservoir sampling: a uniform pick however many are ready. */
        seen++;
        if (n < 64)
            ready[n++] = s;
        else {
            uint64_t j = next_random(g.rng) % seen;
            if (j < 64)
                ready[j] = s;
        }
    }
    if (n == 0)
        return NULL;
    zs_stream *s = ready[next_random(g.rng) % n];
    if (n > 1 && zs_cfg().stats) {
        uint64_t h = g.order.load(std::memory_order_relaxed);
        uint64_t x = h ^ ((uint64_t)s->index << 32 ^ s->queue.front()->seq);
        h = next_random(x);
        g.order.store(h, std::memory_order_relaxed);
        g.choices.fetch_add(1, std::memory_order_relaxed);
    }
    return s;
}

void complete(sched &g, zs_stream *s, const zs_op &op)
{
    s->done = op.seq;
    s->busy = false;
    g.done.notify_all();
}

/* Starts or polls op with the race checker's context set; true when done. */
bool run(zs_op &op, bool first)
{
    zs_exec x;
    zs_exec_begin(&x, &op, false);
    bool done;
    if (zs_sticky(op.device) != cudaSuccess) {
        op.skip();
        done = true;
    } else {
        done = first ? op.start() : op.poll();
    }
    zs_exec_end();
    return done;
}

/* Polls every collective in flight once; true when one completed. Lock not
 * held. */
bool poll_flying(sched &g, std::vector<std::pair<zs_stream *, std::unique_ptr<zs_op>>> &flying)
{
    bool moved = false;
    for (size_t i = 0; i < flying.size();) {
        if (!run(*flying[i].second, false)) {
            i++;
            continue;
        }
        std::lock_guard<std::mutex> l(g.lock);
        complete(g, flying[i].first, *flying[i].second);
        flying.erase(flying.begin() + (long)i);
        moved = true;
    }
    return moved;
}

void device_main()
{
    sched &g = S();
    std::vector<std::pair<zs_stream *, std::unique_ptr<zs_op>>> flying;
    std::unique_lock<std::mutex> l(g.lock);
    for (;;) {
        /* Collectives progress between operations (MPI moves data only when
         * polled), as a GPU runs them beside other streams' kernels. */
        bool moved = false;
        if (!flying.empty()) {
            l.unlock();
            moved = poll_flying(g, flying);
            l.lock();
        }
        if (zs_stream *s = pick(g)) {
            std::unique_ptr<zs_op> op = std::move(s->queue.front());
            s->queue.pop_front();
            s->busy = true;
            l.unlock();
            bool done = run(*op, true);
            l.lock();
            if (done)
                complete(g, s, *op);
            else
                flying.emplace_back(s, std::move(op));
            continue;
        }
        if (flying.empty()) {
            g.work.wait(l);
        } else if (!moved) {
            /* Collectives wait on peers: poll again soon without spinning. */
            l.unlock();
            struct timespec ts = {0, 20000};
            nanosleep(&ts, NULL);
            l.lock();
        }
    }
}

zs_stream *stream_at(sched &g, cudaStream_t s, cudaError_t *rc)
{
    *rc = cudaSuccess;
    if (!s) {
        if ((*rc = zs_check_current()) != cudaSuccess)
            return NULL;
        return g.streams[g.legacy[zs_current_device()]];
    }
    uintptr_t v = (uintptr_t)s;
    uint32_t i = (uint32_t)(v & ~kTagMask);
    if ((v & kTagMask) != kStreamTag || i >= g.streams.size() || g.streams[i]->destroyed) {
        *rc = cudaErrorInvalidResourceHandle;
        return NULL;
    }
    return g.streams[i];
}

zs_event_rec *event_at(sched &g, cudaEvent_t e)
{
    uintptr_t v = (uintptr_t)e;
    uint32_t i = (uint32_t)(v & ~kTagMask);
    if ((v & kTagMask) != kEventTag || i >= g.events.size() || g.events[i]->destroyed)
        return NULL;
    return g.events[i];
}

/* Waits for stream s to reach seq and makes its clock visible to the
 * calling host thread. Lock held (released while waiting). */
void wait_locked(sched &g, std::unique_lock<std::mutex> &l, zs_stream *s, uint64_t seq,
                 const zs_vc &vc)
{
    g.done.wait(l, [&] { return s->done >= seq; });
    zs_vc_join(zs_host_vc(), vc);
}

/* The record operation: when it runs, the event's time is now. */
class record_op final : public zs_op {
public:
    std::shared_ptr<double> when;
    bool start() override
    {
        *when = zs_now();
        return true;
    }
    void skip() override { *when = zs_now(); }
};

/* A stream's wait for an event: its dependency does the waiting. */
class wait_op final : public zs_op {
public:
    bool start() override { return true; }
};

cudaError_t create_stream(cudaStream_t *out, unsigned flags)
{
    cudaError_t rc = zs_check_current();
    if (rc != cudaSuccess)
        return zs_fail(rc);
    if (!out || (flags & ~(unsigned)cudaStreamNonBlocking))
        return zs_fail(cudaErrorInvalidValue);
    if ((rc = zs_sticky(zs_current_device())) != cudaSuccess)
        return zs_fail(rc);
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    zs_stream *s = new zs_stream();
    s->index = (uint32_t)g.streams.size();
    s->device = zs_current_device();
    s->flags = flags;
    s->legacy = false;
    g.streams.push_back(s);
    *out = (cudaStream_t)(kStreamTag | s->index);
    return cudaSuccess;
}

cudaError_t create_event(cudaEvent_t *out, unsigned flags)
{
    cudaError_t rc = zs_check_current();
    if (rc != cudaSuccess)
        return zs_fail(rc);
    if (!out || (flags & ~(unsigned)(cudaEventBlockingSync | cudaEventDisableTiming)))
        return zs_fail(cudaErrorInvalidValue);
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    zs_event_rec *e = new zs_event_rec();
    e->device = zs_current_device();
    e->flags = flags;
    *out = (cudaEvent_t)(kEventTag | g.events.size());
    g.events.push_back(e);
    return cudaSuccess;
}

} // namespace

/* ---- shared with the other files ---- */

void zs_vc_join(zs_vc &into, const zs_vc &from)
{
    if (into.size() < from.size())
        into.resize(from.size(), 0);
    for (size_t i = 0; i < from.size(); i++)
        if (from[i] > into[i])
            into[i] = from[i];
}

std::unique_lock<std::mutex> zs_sched_lock() { return std::unique_lock<std::mutex>(S().lock); }

/* A host thread's observations, freed when the thread ends (a watchdog
 * thread that queries events is joined long before the process exits). The
 * pointer itself is trivially destructible, so a call after the free (a
 * destructor at exit) makes a new one instead of touching a dead object. */
struct host_vc_free {
    ~host_vc_free()
    {
        delete t_host_vc;
        t_host_vc = NULL;
    }
};

zs_vc &zs_host_vc()
{
    if (!t_host_vc) {
        static thread_local host_vc_free at_exit;
        (void)at_exit;
        t_host_vc = new zs_vc();
    }
    return *t_host_vc;
}

cudaError_t zs_stream_index(cudaStream_t s, uint32_t *index)
{
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    cudaError_t rc;
    zs_stream *st = stream_at(g, s, &rc);
    if (st)
        *index = st->index;
    return rc;
}

int zs_stream_device(uint32_t index)
{
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    return g.streams[index]->device;
}

std::string zs_stream_name(uint32_t index)
{
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    const zs_stream *s = g.streams[index];
    if (s->legacy)
        return zs_format("the legacy default stream of device %d", s->device);
    return zs_format("stream %u (device %d)", index, s->device);
}

std::string zs_op_history(uint32_t stream, uint64_t seq)
{
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    const zs_stream *s = g.streams[stream];
    if (seq == 0 || seq > s->enqueued || s->enqueued - seq >= kHistory)
        return zs_format("operation #%llu (too old to be described)", (unsigned long long)seq);
    return s->history[seq % kHistory];
}

uint64_t zs_enqueue(uint32_t index, std::unique_ptr<zs_op> op, zs_vc *vc_out)
{
    sched &g = S();
    zs_vc &host = zs_host_vc();
    std::lock_guard<std::mutex> l(g.lock);
    if (!g.started) {
        g.started = true;
        std::thread(device_main).detach();
    }
    zs_stream *s = g.streams[index];
    zs_vc_join(s->vc, host);
    /* The legacy stream waits for every blocking stream of its device, and
     * they wait for it. */
    if (s->legacy) {
        for (zs_stream *b : g.streams)
            if (!b->legacy && b->device == s->device && !(b->flags & cudaStreamNonBlocking)) {
                op->deps.push_back(zs_dep{b->index, b->enqueued});
                zs_vc_join(s->vc, b->vc);
            }
    } else if (!(s->flags & cudaStreamNonBlocking)) {
        zs_stream *legacy = g.streams[g.legacy[s->device]];
        op->deps.push_back(zs_dep{legacy->index, legacy->enqueued});
        zs_vc_join(s->vc, legacy->vc);
    }
    op->device = s->device;
    op->stream = index;
    op->seq = ++s->enqueued;
    op->stamp = zs_stamp(index, op->seq);
    if (s->vc.size() <= index)
        s->vc.resize(index + 1, 0);
    s->vc[index] = op->seq;
    op->vc = s->vc;
    if (vc_out)
        *vc_out = s->vc;
    if (s->history.empty())
        s->history.resize(kHistory);
    s->history[op->seq % kHistory] = op->what;
    uint64_t seq = op->seq;
    s->queue.push_back(std::move(op));
    g.work.notify_one();
    return seq;
}

void zs_host_wait(uint32_t index, uint64_t seq)
{
    sched &g = S();
    std::unique_lock<std::mutex> l(g.lock);
    zs_stream *s = g.streams[index];
    zs_vc vc = s->vc;
    wait_locked(g, l, s, seq, vc);
}

void zs_device_wait(int device)
{
    sched &g = S();
    std::unique_lock<std::mutex> l(g.lock);
    for (size_t i = 0; i < g.streams.size(); i++) {
        zs_stream *s = g.streams[i];
        if (s->device != device)
            continue;
        zs_vc vc = s->vc;
        wait_locked(g, l, s, s->enqueued, vc);
    }
}

/* ---- the API: streams ---- */

extern "C" cudaError_t cudaStreamCreate(cudaStream_t *stream)
{
    return create_stream(stream, cudaStreamDefault);
}

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags)
{
    return create_stream(stream, flags);
}

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    cudaError_t rc;
    zs_stream *s = stream_at(g, stream, &rc);
    if (!s || s->legacy)
        return zs_fail(s ? cudaErrorInvalidResourceHandle : rc);
    /* Queued work still runs, as CUDA's; the handle is dead at once. */
    s->destroyed = true;
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    zs_note_host_block();
    sched &g = S();
    std::unique_lock<std::mutex> l(g.lock);
    cudaError_t rc;
    zs_stream *s = stream_at(g, stream, &rc);
    if (!s)
        return zs_fail(rc);
    zs_vc vc = s->vc;
    wait_locked(g, l, s, s->enqueued, vc);
    return zs_fail(zs_sticky(s->device));
}

extern "C" cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    cudaError_t rc;
    zs_stream *s = stream_at(g, stream, &rc);
    if (!s)
        return zs_fail(rc);
    if ((rc = zs_sticky(s->device)) != cudaSuccess)
        return zs_fail(rc);
    if (s->done < s->enqueued)
        return cudaErrorNotReady;
    zs_vc_join(zs_host_vc(), s->vc);
    return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceSynchronize(void)
{
    zs_note_host_block();
    cudaError_t rc = zs_check_current();
    if (rc != cudaSuccess)
        return zs_fail(rc);
    zs_device_wait(zs_current_device());
    return zs_fail(zs_sticky(zs_current_device()));
}

/* ---- the API: events ---- */

extern "C" cudaError_t cudaEventCreate(cudaEvent_t *event)
{
    return create_event(event, cudaEventDefault);
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags)
{
    return create_event(event, flags);
}

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t event)
{
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    zs_event_rec *e = event_at(g, event);
    if (!e)
        return zs_fail(cudaErrorInvalidResourceHandle);
    e->destroyed = true;
    e->vc = zs_vc();
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream)
{
    uint32_t si = 0;
    cudaError_t rc = zs_stream_index(stream, &si);
    if (rc != cudaSuccess)
        return zs_fail(rc);
    sched &g = S();
    std::unique_ptr<record_op> op(new record_op());
    op->when = std::make_shared<double>(0.0);
    op->what = "cudaEventRecord";
    std::shared_ptr<double> when = op->when;
    {
        std::lock_guard<std::mutex> l(g.lock);
        zs_event_rec *e = event_at(g, event);
        if (!e)
            return zs_fail(cudaErrorInvalidResourceHandle);
        if (e->device != g.streams[si]->device)
            return zs_fail(cudaErrorInvalidResourceHandle);
    }
    if ((rc = zs_sticky(zs_stream_device(si))) != cudaSuccess)
        return zs_fail(rc);
    zs_vc vc;
    uint64_t seq = zs_enqueue(si, std::move(op), &vc);
    std::lock_guard<std::mutex> l(g.lock);
    zs_event_rec *e = event_at(g, event);
    if (!e)
        return zs_fail(cudaErrorInvalidResourceHandle);
    e->recorded = true;
    e->stream = si;
    e->seq = seq;
    e->when = when;
    e->vc = vc; /* the record's own clock: what a wait for it inherits */
    return cudaSuccess;
}

extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event,
                                           unsigned int flags)
{
    if (flags != 0)
        return zs_fail(cudaErrorInvalidValue);
    uint32_t si = 0;
    cudaError_t rc = zs_stream_index(stream, &si);
    if (rc != cudaSuccess)
        return zs_fail(rc);
    sched &g = S();
    std::unique_ptr<wait_op> op(new wait_op());
    {
        std::lock_guard<std::mutex> l(g.lock);
        zs_event_rec *e = event_at(g, event);
        if (!e)
            return zs_fail(cudaErrorInvalidResourceHandle);
        /* A wait for an event never recorded waits for nothing. */
        if (!e->recorded)
            return cudaSuccess;
        op->deps.push_back(zs_dep{e->stream, e->seq});
        op->what = zs_format("cudaStreamWaitEvent (for %s operation #%llu)",
                             e->stream == si ? "its own" : "another stream's",
                             (unsigned long long)e->seq);
        zs_vc_join(g.streams[si]->vc, e->vc);
    }
    zs_enqueue(si, std::move(op));
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t event)
{
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    zs_event_rec *e = event_at(g, event);
    if (!e)
        return zs_fail(cudaErrorInvalidResourceHandle);
    cudaError_t rc = zs_sticky(e->device);
    if (rc != cudaSuccess)
        return zs_fail(rc);
    if (!e->recorded)
        return cudaSuccess;
    if (g.streams[e->stream]->done < e->seq)
        return cudaErrorNotReady;
    zs_vc_join(zs_host_vc(), e->vc);
    return cudaSuccess;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    zs_note_host_block();
    sched &g = S();
    std::unique_lock<std::mutex> l(g.lock);
    zs_event_rec *e = event_at(g, event);
    if (!e)
        return zs_fail(cudaErrorInvalidResourceHandle);
    if (e->recorded) {
        zs_vc vc = e->vc;
        wait_locked(g, l, g.streams[e->stream], e->seq, vc);
    }
    return zs_fail(zs_sticky(e->device));
}

extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    if (!ms)
        return zs_fail(cudaErrorInvalidValue);
    sched &g = S();
    std::lock_guard<std::mutex> l(g.lock);
    zs_event_rec *a = event_at(g, start), *b = event_at(g, end);
    if (!a || !b || (a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming))
        return zs_fail(cudaErrorInvalidResourceHandle);
    if (!a->recorded || !b->recorded)
        return zs_fail(cudaErrorInvalidResourceHandle);
    if (g.streams[a->stream]->done < a->seq || g.streams[b->stream]->done < b->seq)
        return zs_fail(cudaErrorNotReady);
    *ms = (float)((*b->when - *a->when) * 1e3);
    return cudaSuccess;
}
