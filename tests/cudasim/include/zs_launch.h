/*
 * zs_launch.h (zerotrain's CUDA simulator, tests/cudasim): the kernel
 * launcher behind ZT_LAUNCH (engine/cuda/kernel_launch.cuh). The macro hands
 * zs_launch the configuration, the kernel's text and launch site, and two
 * generic lambdas: one calls the kernel with the launch's arguments (so C++
 * resolves the kernel as the <<<>>> call would, deducing a template's
 * remaining arguments, converting each argument to its parameter), one finds
 * the kernel's address for cudaFuncSetAttribute's opt-ins. Then
 *
 *     zs_launch(...)(args...)
 *
 * does what kernel<<<grid, block, shared_bytes, stream>>>(args...) does:
 * copies the arguments, checks the configuration (a bad one is the call's
 * error, for cudaGetLastError) and queues the kernel on the stream. Before
 * queueing it checks every pointer the kernel is handed, directly or inside a
 * class argument (a functor: its bytes, padding cleared, are scanned for
 * 8-byte words that point into host memory or the device range; a word of
 * plain data that happens to equal such an address would be a false alarm,
 * which 64-bit address layouts make unlikely): each must be null or lie in a
 * live device allocation of the stream's device. A host pointer is reported
 * naming the kernel, the launch site and the argument, and fails the device
 * as the kernel's first access would on a GPU (cudaErrorIllegalAddress,
 * sticky).
 *
 * Limit: a function template whose last template arguments are deduced from
 * the call (map_kernel<V>(op, n)) must get arguments of exactly its
 * parameters' types, or the address lookup does not compile.
 *
 * Memory: the launch owns the copied arguments until the kernel has run.
 * Thread safety: any host thread may launch.
 */
#ifndef ZS_LAUNCH_H
#define ZS_LAUNCH_H

#include <stddef.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include <cuda_runtime_api.h>
#include <zs_device.h>

enum zs_arg_kind { ZS_ARG_SCALAR, ZS_ARG_POINTER, ZS_ARG_CLASS };

/* One kernel argument as the launch checks see it: its copied bytes. */
struct zs_arg_desc {
    zs_arg_kind kind;
    const void *bytes;
    size_t size;
    const char *type;
};

/* A queued kernel: its copied arguments and how to run one thread. */
class zs_kernel_job {
public:
    virtual ~zs_kernel_job() = default;
    /* Runs the kernel body once with the copied arguments (the fiber
     * scheduler has set threadIdx and friends). */
    virtual void run_thread() = 0;
    virtual int arg_count() const = 0;
    virtual zs_arg_desc arg(int i) const = 0;
};

struct zs_launch_config {
    dim3 grid, block;
    size_t shared_bytes;
    cudaStream_t stream;
    const char *kernel; /* the launch's text, e.g. map_kernel<V> */
    const void *entry;  /* the kernel function (cudaFuncSetAttribute's key), or NULL */
    const char *file;
    int line;
};

/* Checks and queues a launch (tests/cudasim/sim/launch.cc); takes `job`. */
void zs_launch_submit(const zs_launch_config &cfg, zs_kernel_job *job);
/* The name inside a __PRETTY_FUNCTION__ "[with T = name]", kept for the
 * process (launch.cc). */
const char *zs_intern_name(const char *pretty);

template <class T> inline const char *zs_type_name()
{
    static const char *name = zs_intern_name(__PRETTY_FUNCTION__);
    return name;
}

template <class T> inline zs_arg_desc zs_describe_arg(const T &v)
{
    zs_arg_kind kind = std::is_pointer<T>::value                          ? ZS_ARG_POINTER
                       : std::is_class<T>::value || std::is_union<T>::value ? ZS_ARG_CLASS
                                                                            : ZS_ARG_SCALAR;
    return zs_arg_desc{kind, &v, sizeof(T), zs_type_name<T>()};
}

/* The kernel's address: a function whose parameters are exactly the
 * arguments' types (a deduced template), any single function, else none. */
template <int N> struct zs_rank : zs_rank<N - 1> {
};
template <> struct zs_rank<0> {
};
template <class... A> inline const void *zs_entry(zs_rank<2>, void (*f)(A...))
{
    return reinterpret_cast<const void *>(f);
}
template <class... A, class... P> inline const void *zs_entry(zs_rank<1>, void (*f)(P...))
{
    return reinterpret_cast<const void *>(f);
}
template <class... A> inline const void *zs_entry(zs_rank<0>, ...) { return nullptr; }

/* A class argument's padding is whatever the caller's stack held (often a
 * pointer's high half): zeroed, so that the pointer scan sees only members. */
template <class T> inline void zs_clear_padding(T &v)
{
    if constexpr (std::is_class<T>::value)
        __builtin_clear_padding(&v);
    else
        (void)v;
}

template <class Body, class... T> class zs_kernel_job_of final : public zs_kernel_job {
public:
    template <class... A>
    explicit zs_kernel_job_of(const Body &body, A &&...a) : body_(body), args_(std::forward<A>(a)...)
    {
        std::apply([](T &...v) { (zs_clear_padding(v), ...); }, args_);
    }
    void run_thread() override { std::apply(body_, args_); }
    int arg_count() const override { return (int)sizeof...(T); }
    zs_arg_desc arg(int i) const override
    {
        return describe(i, std::index_sequence_for<T...>{});
    }

private:
    template <size_t... I> zs_arg_desc describe(int i, std::index_sequence<I...>) const
    {
        if constexpr (sizeof...(I) == 0) {
            (void)i;
            return zs_arg_desc{ZS_ARG_SCALAR, nullptr, 0, ""};
        } else {
            const zs_arg_desc all[] = {zs_describe_arg(std::get<I>(args_))...};
            return all[i];
        }
    }
    Body body_;
    std::tuple<T...> args_;
};

template <class Body, class Entry> struct zs_launcher {
    zs_launch_config cfg;
    Body body;
    Entry entry;
    template <class... A> void operator()(A &&...a) const
    {
        zs_launch_config c = cfg;
        c.entry = entry(a...);
        zs_launch_submit(c, new zs_kernel_job_of<Body, std::decay_t<A>...>(body,
                                                                           std::forward<A>(a)...));
    }
};

template <class Body, class Entry>
inline zs_launcher<Body, Entry> zs_launch(dim3 grid, dim3 block, size_t shared_bytes,
                                          cudaStream_t stream, const char *kernel,
                                          const char *file, int line, Body body, Entry entry)
{
    return zs_launcher<Body, Entry>{
        zs_launch_config{grid, block, shared_bytes, stream, kernel, nullptr, file, line}, body,
        entry};
}

#endif
