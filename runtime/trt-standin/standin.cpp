// tether's TensorRT STAND-IN library. THIS IS NOT TENSORRT.
//
// A shared library built by tether's tests (build.sh) from NVIDIA's official TensorRT 11.x
// headers, so that tether's TensorRT layer (runtime/src/tensorrt/) can run a plan end to end
// where no TensorRT builder exists: deserialize, execution context, binding, eager enqueue,
// CUDA graph capture, replay. It proves tether's side of the calls (slots, argument and
// result passing, object ownership, its logger and error recorder, binding and stream
// handling), never TensorRT's behaviour. See README.md.
//
// What it is:
// - the plain-C entry points tether resolves (`createInferRuntime_INTERNAL`,
//   `getInferLibVersion`, `getInferLib{Major,Minor,Patch,Build}Version`, and
//   `createInferBuilder_INTERNAL` in the standard flavour, which is how tether tells the
//   standard runtime from the lean one; build with -DTETHER_STANDIN_LEAN for the lean one);
// - real C++ classes deriving from the official `nvinfer1::apiv::VRuntime`, `VCudaEngine`
//   and `VExecutionContext`, every pure virtual implemented, returned to the caller as the
//   public two-word objects `[vptr][mImpl]` (`IRuntime`, `ICudaEngine`,
//   `IExecutionContext`), whose `mImpl` points to the apiv object and whose deleting
//   destructor destroys it, as TensorRT's own are; `getPImpl()` returns the public object;
// - a plan format of its own ("TSTANDIN 1" text, see parsePlan) declaring one f32 input of
//   shape [1, n] (n fixed or dynamic in [n_min, n_max]), one f32 output of the same shape,
//   the op y = a*x + b, and extra workspace bytes;
// - `enqueueV3(stream)` launches two real CUDA kernels (kernels.ptx, embedded) on the given
//   stream through the CUDA driver API, loaded with dlopen("libcuda.so.1") at the first
//   enqueue: everything up to the enqueue works without a GPU or driver. The kernels read
//   the bound input, pass the intermediate through the bound workspace (and write a header
//   there: magic, run counter, n) and write the bound output. The addresses are read at
//   each enqueue, so a context re-bound with setTensorAddress / setDeviceMemoryV2 uses the
//   latest ones. Like TensorRT, the first enqueue of a context does one-time work (here:
//   loading the kernel module) and refuses to run under stream capture.
// - `tether_standin_report` (extra export, for tests): a text snapshot of what the caller
//   did (objects alive, the latest context's strategy, device memory, tensor addresses,
//   shapes, enqueue and launch counts, error-recorder references).
//
// Errors go to the error recorder the caller set (tether sets one per runtime; engines and
// contexts inherit it, holding a reference each), else to the logger as kERROR. Every
// message starts with "stand-in:". Methods tether does not call are implemented as harmless
// defaults and log "stand-in: <Class>::<method> is not supported" (kWARNING) when called.

#define TENSORRT_BUILD_LIB 1 // exported entry points get default visibility (NvInferRuntimeBase.h)
#include <NvInfer.h>

#include <dlfcn.h>

#include <cctype>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <vector>

static_assert(NV_TENSORRT_MAJOR == 11, "the stand-in implements the TensorRT 11.x apiv interfaces");

namespace
{
using namespace nvinfer1;

constexpr char const* kIdentity = "tether TensorRT stand-in (NOT TensorRT)";
#ifdef TETHER_STANDIN_LEAN
constexpr bool kLean = true;
#else
constexpr bool kLean = false;
#endif
constexpr int32_t kLibVersion = NV_TENSORRT_MAJOR * 10000 + NV_TENSORRT_MINOR * 100 + NV_TENSORRT_PATCH;

constexpr int32_t kUserManaged = static_cast<int32_t>(ExecutionContextAllocationStrategy::kUSER_MANAGED);
constexpr uint64_t kAlign = 256;          // TensorRT: "The pointer must have at least 256-byte alignment."
constexpr int64_t kWorkspaceHeader = 256; // bytes before the intermediate tensor (see kernels.cu)
constexpr unsigned kBlock = 256;          // threads per block of both kernels

// kernels.ptx, wrapped into a raw string literal by build.sh.
char const kPtx[] =
#include "kernels.ptx.inc"
    ;

// ---------------------------------------------------------------------------------------
// Messages.

std::string format(char const* fmt, std::va_list args)
{
    char buf[1024];
    std::vsnprintf(buf, sizeof(buf), fmt, args);
    return buf;
}

__attribute__((format(printf, 3, 4))) void logf(ILogger* logger, ILogger::Severity severity, char const* fmt, ...)
{
    if (logger == nullptr)
    {
        return;
    }
    std::va_list args;
    va_start(args, fmt);
    std::string msg = format(fmt, args);
    va_end(args);
    logger->log(severity, msg.c_str());
}

// Where an object's errors go: its error recorder, else its logger.
struct Sink
{
    ILogger* logger{};
    IErrorRecorder* recorder{};

    __attribute__((format(printf, 3, 4))) void error(ErrorCode code, char const* fmt, ...) const
    {
        std::va_list args;
        va_start(args, fmt);
        std::string msg = format(fmt, args);
        va_end(args);
        if (recorder != nullptr)
        {
            recorder->reportError(code, msg.c_str());
        }
        else if (logger != nullptr)
        {
            logger->log(ILogger::Severity::kERROR, msg.c_str());
        }
    }

    void unsupported(char const* what) const
    {
        logf(logger, ILogger::Severity::kWARNING, "stand-in: %s is not supported", what);
    }

    // Takes a reference on `r` (dropping the one on the previous recorder), as an object that
    // keeps an error recorder does.
    void setRecorder(IErrorRecorder* r)
    {
        if (r != nullptr)
        {
            r->incRefCount();
        }
        if (recorder != nullptr)
        {
            recorder->decRefCount();
        }
        recorder = r;
    }
};

// ---------------------------------------------------------------------------------------
// The stand-in plan.

struct PlanSpec
{
    std::string name{"standin"};
    std::string input{"x"};
    std::string output{"y"};
    int32_t tensorrt{-1};
    bool versionCompatible{false};
    int32_t hardwareCompat{0};
    int64_t n{0}; // -1: dynamic
    int64_t nMin{1};
    int64_t nMax{0};
    float a{1.0F};
    float b{0.0F};
    bool haveA{false};
    bool haveB{false};
    int64_t workspaceExtra{0};
    std::string text; // the plan as given (for serialize-free diagnostics)

    // Device memory for `n` elements: header + intermediate (rounded to 256) + extra.
    int64_t deviceMemoryFor(int64_t elems) const
    {
        int64_t t = (elems * 4 + static_cast<int64_t>(kAlign) - 1) / static_cast<int64_t>(kAlign)
            * static_cast<int64_t>(kAlign);
        return kWorkspaceHeader + t + workspaceExtra;
    }
    int64_t maxN() const
    {
        return n < 0 ? nMax : n;
    }
};

constexpr int64_t kMaxElems = int64_t{1} << 28;

bool parseInt(std::string const& s, int64_t& out)
{
    if (s.empty())
    {
        return false;
    }
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (errno != 0 || *end != '\0')
    {
        return false;
    }
    out = v;
    return true;
}

bool parseFloat(std::string const& s, float& out)
{
    if (s.empty())
    {
        return false;
    }
    char* end = nullptr;
    errno = 0;
    float v = std::strtof(s.c_str(), &end); // decimal or hex (0x1.8p+1)
    if (errno != 0 || *end != '\0')
    {
        return false;
    }
    out = v;
    return true;
}

bool validName(std::string const& s)
{
    if (s.empty() || s.size() > 255)
    {
        return false;
    }
    for (char c : s)
    {
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-' || c == ':'
                || c == '/'))
        {
            return false;
        }
    }
    return true;
}

// The format, one `key value` per line, `#` starts a comment:
//   TSTANDIN 1                first line, exactly
//   tensorrt 110400           version that "built" the plan (MAJOR*10000+MINOR*100+PATCH), required
//   name affine               engine name (default "standin")
//   input x                   input tensor name (default "x")
//   output y                  output tensor name (default "y")
//   n 1024                    elements of dimension 1 (shape [1, n]); -1 = dynamic, required
//   n_min 1 / n_max 4096      range of a dynamic n (n_max required when n = -1)
//   a 2.5 / b -1.25           the op y = a*x + b (f32, decimal or hex float), required
//   workspace_extra 0         extra device-memory bytes the engine asks for (default 0)
//   version_compatible 0      1: the plan "embeds host code" (needs setEngineHostCodeAllowed)
//   hardware_compat 0         reported by getHardwareCompatibilityLevel (0, 1, 2)
bool parsePlan(void const* blob, std::size_t size, PlanSpec& spec, std::string& why)
{
    if (blob == nullptr || size == 0)
    {
        why = "empty plan (" + std::to_string(size) + " bytes)";
        return false;
    }
    if (size > (1U << 20))
    {
        why = "plan of " + std::to_string(size) + " bytes is larger than a stand-in plan can be (1 MiB)";
        return false;
    }
    std::string text(static_cast<char const*>(blob), size);
    if (text.compare(0, 8, "TSTANDIN") != 0)
    {
        char head[17] = {};
        for (std::size_t i = 0; i < 16 && i < size; ++i)
        {
            unsigned char c = static_cast<unsigned char>(text[i]);
            head[i] = std::isprint(c) ? static_cast<char>(c) : '.';
        }
        why = std::string("not a stand-in plan: it starts with \"") + head
            + "\", not TSTANDIN (this library runs stand-in plans only, never real TensorRT plans)";
        return false;
    }
    spec.text = text;
    std::size_t pos = 0;
    int line = 0;
    bool haveN = false;
    while (pos <= text.size())
    {
        std::size_t eol = text.find('\n', pos);
        if (eol == std::string::npos)
        {
            eol = text.size();
        }
        std::string raw = text.substr(pos, eol - pos);
        pos = eol + 1;
        ++line;
        std::size_t hash = raw.find('#');
        if (hash != std::string::npos)
        {
            raw.resize(hash);
        }
        std::vector<std::string> tok;
        std::size_t i = 0;
        while (i < raw.size())
        {
            while (i < raw.size() && std::isspace(static_cast<unsigned char>(raw[i])))
            {
                ++i;
            }
            std::size_t j = i;
            while (j < raw.size() && !std::isspace(static_cast<unsigned char>(raw[j])))
            {
                ++j;
            }
            if (j > i)
            {
                tok.push_back(raw.substr(i, j - i));
            }
            i = j;
        }
        if (line == 1)
        {
            if (tok.size() != 2 || tok[0] != "TSTANDIN" || tok[1] != "1")
            {
                why = "line 1 must be \"TSTANDIN 1\" (stand-in plan format version 1)";
                return false;
            }
            continue;
        }
        if (tok.empty())
        {
            continue;
        }
        auto bad = [&](char const* what) {
            why = "line " + std::to_string(line) + ": " + what + " (\"" + raw + "\")";
            return false;
        };
        if (tok.size() != 2)
        {
            return bad("expected `key value`");
        }
        std::string const& k = tok[0];
        std::string const& v = tok[1];
        int64_t iv = 0;
        if (k == "name" || k == "input" || k == "output")
        {
            if (!validName(v))
            {
                return bad("a name is 1-255 characters of [A-Za-z0-9_.:/-]");
            }
            (k == "name" ? spec.name : k == "input" ? spec.input : spec.output) = v;
        }
        else if (k == "tensorrt")
        {
            if (!parseInt(v, iv) || iv < 100000 || iv > 999999)
            {
                return bad("tensorrt is MAJOR*10000+MINOR*100+PATCH, e.g. 110400");
            }
            spec.tensorrt = static_cast<int32_t>(iv);
        }
        else if (k == "n")
        {
            if (!parseInt(v, iv) || (iv != -1 && (iv < 1 || iv > kMaxElems)))
            {
                return bad("n is -1 (dynamic) or 1..2^28");
            }
            spec.n = iv;
            haveN = true;
        }
        else if (k == "n_min" || k == "n_max")
        {
            if (!parseInt(v, iv) || iv < 1 || iv > kMaxElems)
            {
                return bad("n_min / n_max are 1..2^28");
            }
            (k == "n_min" ? spec.nMin : spec.nMax) = iv;
        }
        else if (k == "a" || k == "b")
        {
            float f = 0;
            if (!parseFloat(v, f))
            {
                return bad("a / b are f32 numbers");
            }
            (k == "a" ? spec.a : spec.b) = f;
            (k == "a" ? spec.haveA : spec.haveB) = true;
        }
        else if (k == "workspace_extra")
        {
            if (!parseInt(v, iv) || iv < 0 || iv > (int64_t{1} << 32))
            {
                return bad("workspace_extra is 0..2^32 bytes");
            }
            spec.workspaceExtra = iv;
        }
        else if (k == "version_compatible")
        {
            if (v != "0" && v != "1")
            {
                return bad("version_compatible is 0 or 1");
            }
            spec.versionCompatible = v == "1";
        }
        else if (k == "hardware_compat")
        {
            if (!parseInt(v, iv) || iv < 0 || iv > 2)
            {
                return bad("hardware_compat is 0, 1 or 2");
            }
            spec.hardwareCompat = static_cast<int32_t>(iv);
        }
        else
        {
            return bad("unknown key");
        }
    }
    if (spec.tensorrt < 0 || !haveN || !spec.haveA || !spec.haveB)
    {
        why = "a stand-in plan needs the keys tensorrt, n, a and b";
        return false;
    }
    if (spec.n == -1 && (spec.nMax < spec.nMin || spec.nMax < 1))
    {
        why = "a dynamic n needs 1 <= n_min <= n_max (n_min " + std::to_string(spec.nMin) + ", n_max "
            + std::to_string(spec.nMax) + ")";
        return false;
    }
    if (spec.input == spec.output)
    {
        why = "input and output are both called `" + spec.input + "`";
        return false;
    }
    return true;
}

// ---------------------------------------------------------------------------------------
// The CUDA driver API, loaded at the first enqueue (own declarations: no CUDA headers).

using CUresult = int;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = cudaStream_t; // struct CUstream_st*, the same handle as cudaStream_t
using CUdeviceptr = unsigned long long;
constexpr int kCaptureStatusNone = 0;   // CU_STREAM_CAPTURE_STATUS_NONE
constexpr int kCaptureStatusActive = 1; // CU_STREAM_CAPTURE_STATUS_ACTIVE
constexpr int kJitErrorLogBuffer = 5;   // CU_JIT_ERROR_LOG_BUFFER
constexpr int kJitErrorLogBufferSize = 6; // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES

struct Driver
{
    CUresult (*cuInit)(unsigned){};
    CUresult (*cuGetErrorName)(CUresult, char const**){};
    CUresult (*cuCtxGetCurrent)(CUcontext*){};
    CUresult (*cuCtxPushCurrent)(CUcontext){};
    CUresult (*cuCtxPopCurrent)(CUcontext*){};
    CUresult (*cuStreamGetCtx)(CUstream, CUcontext*){};
    CUresult (*cuStreamIsCapturing)(CUstream, int*){};
    CUresult (*cuModuleLoadDataEx)(CUmodule*, void const*, unsigned, int*, void**){};
    CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, char const*){};
    CUresult (*cuModuleUnload)(CUmodule){};
    CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
        CUstream, void**, void**){};

    std::string name(CUresult rc) const
    {
        char const* s = nullptr;
        if (cuGetErrorName == nullptr || cuGetErrorName(rc, &s) != 0 || s == nullptr)
        {
            return "CUresult " + std::to_string(rc);
        }
        return std::string(s) + " (" + std::to_string(rc) + ")";
    }
};

std::mutex gDriverMutex;
Driver gDriver;
bool gDriverTried = false;
std::string gDriverError;

// The driver, or nullptr with the reason in `why`. Loaded once; never unloaded.
Driver const* driver(std::string& why)
{
    std::lock_guard<std::mutex> lock(gDriverMutex);
    if (!gDriverTried)
    {
        gDriverTried = true;
        void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
        if (lib == nullptr)
        {
            char const* e = dlerror();
            gDriverError = std::string("the CUDA driver (libcuda.so.1) could not be loaded: ") + (e ? e : "?");
        }
        else
        {
            Driver d;
            bool ok = true;
            auto sym = [&](auto& fn, char const* name) {
                void* p = dlsym(lib, name);
                if (p == nullptr)
                {
                    ok = false;
                    gDriverError += std::string(gDriverError.empty() ? "libcuda.so.1 lacks " : ", ") + name;
                }
                fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
            };
            sym(d.cuInit, "cuInit");
            sym(d.cuGetErrorName, "cuGetErrorName");
            sym(d.cuCtxGetCurrent, "cuCtxGetCurrent");
            sym(d.cuCtxPushCurrent, "cuCtxPushCurrent_v2");
            sym(d.cuCtxPopCurrent, "cuCtxPopCurrent_v2");
            sym(d.cuStreamGetCtx, "cuStreamGetCtx");
            sym(d.cuStreamIsCapturing, "cuStreamIsCapturing");
            sym(d.cuModuleLoadDataEx, "cuModuleLoadDataEx");
            sym(d.cuModuleGetFunction, "cuModuleGetFunction");
            sym(d.cuModuleUnload, "cuModuleUnload");
            sym(d.cuLaunchKernel, "cuLaunchKernel");
            if (ok)
            {
                CUresult rc = d.cuInit(0);
                if (rc != 0)
                {
                    gDriverError = "cuInit failed: " + d.name(rc);
                }
                else
                {
                    gDriver = d;
                }
            }
        }
    }
    if (!gDriverError.empty())
    {
        why = gDriverError;
        return nullptr;
    }
    return &gDriver;
}

// ---------------------------------------------------------------------------------------
// Bookkeeping for tether_standin_report.

class ContextImpl;
class RuntimeImpl;
std::mutex gMutex; // guards the lists below and every context's bound state
std::vector<RuntimeImpl*> gRuntimes;
std::vector<class EngineImpl*> gEngines;
std::vector<ContextImpl*> gContexts;
int64_t gContextSerial = 0;

template <typename T>
void forget(std::vector<T*>& v, T* p)
{
    for (auto it = v.begin(); it != v.end(); ++it)
    {
        if (*it == p)
        {
            v.erase(it);
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Public objects: what TensorRT returns. Two words, [vptr][mImpl]; deleting one destroys its
// apiv implementation.

class RuntimePublic final : public IRuntime
{
public:
    explicit RuntimePublic(apiv::VRuntime* impl) noexcept
    {
        mImpl = impl;
    }
    ~RuntimePublic() noexcept override
    {
        delete mImpl;
    }
};

class EnginePublic final : public ICudaEngine
{
public:
    explicit EnginePublic(apiv::VCudaEngine* impl) noexcept
    {
        mImpl = impl;
    }
    ~EnginePublic() noexcept override
    {
        delete mImpl;
    }
};

class ContextPublic final : public IExecutionContext
{
public:
    explicit ContextPublic(apiv::VExecutionContext* impl) noexcept
    {
        mImpl = impl;
    }
    ~ContextPublic() noexcept override
    {
        delete mImpl;
    }
};

static_assert(sizeof(RuntimePublic) == 2 * sizeof(void*), "IRuntime is [vptr][mImpl]");
static_assert(sizeof(EnginePublic) == 2 * sizeof(void*), "ICudaEngine is [vptr][mImpl]");
static_assert(sizeof(ContextPublic) == 2 * sizeof(void*), "IExecutionContext is [vptr][mImpl]");

// getPluginRegistry() returns a reference; the stand-in has no plugins.
class EmptyPluginRegistry final : public IPluginRegistry
{
public:
    ~EmptyPluginRegistry() noexcept override = default;
    void setErrorRecorder(IErrorRecorder* const) noexcept override {}
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return nullptr;
    }
    bool isParentSearchEnabled() const override
    {
        return false;
    }
    void setParentSearchEnabled(bool const) override {}
    PluginLibraryHandle loadLibrary(AsciiChar const*) noexcept override
    {
        return nullptr;
    }
    void deregisterLibrary(PluginLibraryHandle) noexcept override {}
    bool registerCreator(IPluginCreatorInterface&, AsciiChar const* const) noexcept override
    {
        return false;
    }
    IPluginCreatorInterface* const* getAllCreators(int32_t* const numCreators) const noexcept override
    {
        if (numCreators != nullptr)
        {
            *numCreators = 0;
        }
        return nullptr;
    }
    IPluginCreatorInterface* getCreator(AsciiChar const* const, AsciiChar const* const,
        AsciiChar const* const) noexcept override
    {
        return nullptr;
    }
    bool deregisterCreator(IPluginCreatorInterface const&) noexcept override
    {
        return false;
    }
    IPluginResource* acquirePluginResource(AsciiChar const*, IPluginResource*) noexcept override
    {
        return nullptr;
    }
    int32_t releasePluginResource(AsciiChar const*) noexcept override
    {
        return -1;
    }
    IPluginCreatorInterface* const* getAllCreatorsRecursive(int32_t* const numCreators) noexcept override
    {
        if (numCreators != nullptr)
        {
            *numCreators = 0;
        }
        return nullptr;
    }
};

EmptyPluginRegistry gPluginRegistry;

Dims invalidDims()
{
    Dims d{};
    d.nbDims = -1;
    return d;
}

Dims dims2(int64_t d0, int64_t d1)
{
    Dims d{};
    d.nbDims = 2;
    d.d[0] = d0;
    d.d[1] = d1;
    return d;
}

std::string dimsText(Dims const& d)
{
    std::string s = "[";
    for (int32_t i = 0; i < d.nbDims && i < Dims::MAX_DIMS; ++i)
    {
        s += (i ? ", " : "") + std::to_string(d.d[i]);
    }
    return s + "] (nbDims " + std::to_string(d.nbDims) + ")";
}

// ---------------------------------------------------------------------------------------
// The engine.

class EngineImpl final : public apiv::VCudaEngine
{
public:
    EngineImpl(PlanSpec spec, ILogger* logger, IErrorRecorder* recorder)
        : mSpec(std::move(spec))
    {
        mSink.logger = logger;
        mSink.setRecorder(recorder);
        std::lock_guard<std::mutex> lock(gMutex);
        gEngines.push_back(this);
    }
    ~EngineImpl() noexcept override
    {
        logf(mSink.logger, ILogger::Severity::kINFO, "stand-in: engine `%s` destroyed", mSpec.name.c_str());
        mSink.setRecorder(nullptr);
        std::lock_guard<std::mutex> lock(gMutex);
        forget(gEngines, this);
    }

    ICudaEngine* mPublic{};
    PlanSpec mSpec;
    Sink mSink;

    // 0 input, 1 output, -1 unknown (reported).
    int32_t index(char const* name, char const* method) const
    {
        if (name != nullptr && mSpec.input == name)
        {
            return 0;
        }
        if (name != nullptr && mSpec.output == name)
        {
            return 1;
        }
        mSink.error(ErrorCode::kINVALID_ARGUMENT, "stand-in: %s: engine `%s` has no I/O tensor named `%s` (it has `%s`, `%s`)",
            method, mSpec.name.c_str(), name ? name : "(null)", mSpec.input.c_str(), mSpec.output.c_str());
        return -1;
    }

    ICudaEngine* getPImpl() noexcept override
    {
        return mPublic;
    }
    int32_t getNbLayers() const noexcept override
    {
        return 2; // the two kernels
    }
    IHostMemory* serialize() const noexcept override
    {
        mSink.unsupported("VCudaEngine::serialize");
        return nullptr;
    }
    IExecutionContext* createExecutionContext(ExecutionContextAllocationStrategy strategy) noexcept override;
    bool isRefittable() const noexcept override
    {
        return false;
    }
    char const* getName() const noexcept override
    {
        return mSpec.name.c_str();
    }
    int32_t getNbOptimizationProfiles() const noexcept override
    {
        return 1;
    }
    EngineCapability getEngineCapability() const noexcept override
    {
        return EngineCapability::kSTANDARD;
    }
    void setErrorRecorder(IErrorRecorder* recorder) noexcept override
    {
        mSink.setRecorder(recorder);
    }
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return mSink.recorder;
    }
    TacticSources getTacticSources() const noexcept override
    {
        return 0;
    }
    ProfilingVerbosity getProfilingVerbosity() const noexcept override
    {
        return ProfilingVerbosity::kLAYER_NAMES_ONLY;
    }
    IEngineInspector* createEngineInspector() const noexcept override
    {
        mSink.unsupported("VCudaEngine::createEngineInspector");
        return nullptr;
    }
    Dims getTensorShape(char const* tensorName) const noexcept override
    {
        if (index(tensorName, "ICudaEngine::getTensorShape") < 0)
        {
            return invalidDims();
        }
        return dims2(1, mSpec.n);
    }
    DataType getTensorDataType(char const* tensorName) const noexcept override
    {
        index(tensorName, "ICudaEngine::getTensorDataType");
        return DataType::kFLOAT;
    }
    TensorLocation getTensorLocation(char const* tensorName) const noexcept override
    {
        index(tensorName, "ICudaEngine::getTensorLocation");
        return TensorLocation::kDEVICE;
    }
    bool isShapeInferenceIO(char const* tensorName) const noexcept override
    {
        index(tensorName, "ICudaEngine::isShapeInferenceIO");
        return false;
    }
    TensorIOMode getTensorIOMode(char const* tensorName) const noexcept override
    {
        int32_t i = index(tensorName, "ICudaEngine::getTensorIOMode");
        return i == 0 ? TensorIOMode::kINPUT : i == 1 ? TensorIOMode::kOUTPUT : TensorIOMode::kNONE;
    }
    int32_t getTensorBytesPerComponent(char const* tensorName) const noexcept override
    {
        return index(tensorName, "ICudaEngine::getTensorBytesPerComponent") < 0 ? -1 : 4;
    }
    int32_t getTensorComponentsPerElement(char const* tensorName) const noexcept override
    {
        return index(tensorName, "ICudaEngine::getTensorComponentsPerElement") < 0 ? -1 : 1;
    }
    TensorFormat getTensorFormat(char const* tensorName) const noexcept override
    {
        index(tensorName, "ICudaEngine::getTensorFormat");
        return TensorFormat::kLINEAR;
    }
    char const* getTensorFormatDesc(char const* tensorName) const noexcept override
    {
        return index(tensorName, "ICudaEngine::getTensorFormatDesc") < 0 ? nullptr
                                                                         : "stand-in: row-major linear FP32";
    }
    int32_t getTensorVectorizedDim(char const* tensorName) const noexcept override
    {
        index(tensorName, "ICudaEngine::getTensorVectorizedDim");
        return -1;
    }
    Dims getProfileShape(char const* tensorName, int32_t profileIndex, OptProfileSelector select) const noexcept override
    {
        if (index(tensorName, "ICudaEngine::getProfileShape") != 0 || profileIndex != 0)
        {
            return invalidDims();
        }
        if (mSpec.n >= 0)
        {
            return dims2(1, mSpec.n);
        }
        return dims2(1, select == OptProfileSelector::kMIN ? mSpec.nMin : mSpec.nMax);
    }
    int32_t getNbIOTensors() const noexcept override
    {
        return 2;
    }
    char const* getIOTensorName(int32_t index) const noexcept override
    {
        return index == 0 ? mSpec.input.c_str() : index == 1 ? mSpec.output.c_str() : nullptr;
    }
    HardwareCompatibilityLevel getHardwareCompatibilityLevel() const noexcept override
    {
        return static_cast<HardwareCompatibilityLevel>(mSpec.hardwareCompat);
    }
    int32_t getNbAuxStreams() const noexcept override
    {
        return 0;
    }
    int32_t getTensorBytesPerComponentV2(char const* tensorName, int32_t) const noexcept override
    {
        return getTensorBytesPerComponent(tensorName);
    }
    int32_t getTensorComponentsPerElementV2(char const* tensorName, int32_t) const noexcept override
    {
        return getTensorComponentsPerElement(tensorName);
    }
    TensorFormat getTensorFormatV2(char const* tensorName, int32_t) const noexcept override
    {
        return getTensorFormat(tensorName);
    }
    char const* getTensorFormatDescV2(char const* tensorName, int32_t) const noexcept override
    {
        return getTensorFormatDesc(tensorName);
    }
    int32_t getTensorVectorizedDimV2(char const* tensorName, int32_t) const noexcept override
    {
        return getTensorVectorizedDim(tensorName);
    }
    ISerializationConfig* createSerializationConfig() noexcept override
    {
        mSink.unsupported("VCudaEngine::createSerializationConfig");
        return nullptr;
    }
    IHostMemory* serializeWithConfig(ISerializationConfig&) const noexcept override
    {
        mSink.unsupported("VCudaEngine::serializeWithConfig");
        return nullptr;
    }
    IRefitter* createRefitter(ILogger&) noexcept override
    {
        mSink.unsupported("VCudaEngine::createRefitter");
        return nullptr;
    }
    int64_t getStreamableWeightsSize() const noexcept override
    {
        return 0;
    }
    bool isDebugTensor(char const*) const noexcept override
    {
        return false;
    }
    bool setWeightStreamingBudgetV2(int64_t) noexcept override
    {
        mSink.unsupported("VCudaEngine::setWeightStreamingBudgetV2");
        return false;
    }
    int64_t getWeightStreamingBudgetV2() const noexcept override
    {
        return 0;
    }
    int64_t getWeightStreamingAutomaticBudget() const noexcept override
    {
        return 0;
    }
    int64_t getWeightStreamingScratchMemorySize() const noexcept override
    {
        return 0;
    }
    int64_t getDeviceMemorySizeV2() const noexcept override
    {
        return mSpec.deviceMemoryFor(mSpec.maxN());
    }
    int64_t getDeviceMemorySizeForProfileV2(int32_t profileIndex) const noexcept override
    {
        return profileIndex == 0 ? getDeviceMemorySizeV2() : -1;
    }
    int64_t const* getProfileTensorValuesV2(char const*, int32_t, OptProfileSelector) const noexcept override
    {
        return nullptr; // no shape tensors
    }
    IExecutionContext* createExecutionContextWithRuntimeConfig(IRuntimeConfig*) noexcept override
    {
        mSink.unsupported("VCudaEngine::createExecutionContextWithRuntimeConfig");
        return nullptr;
    }
    IRuntimeConfig* createRuntimeConfig() noexcept override
    {
        mSink.unsupported("VCudaEngine::createRuntimeConfig");
        return nullptr;
    }
    int64_t getEngineStat(EngineStat) const noexcept override
    {
        return 0; // no weights
    }
    char const* getAliasedInputTensor(char const*) const noexcept override
    {
        return nullptr;
    }
};

// ---------------------------------------------------------------------------------------
// The execution context.

class ContextImpl final : public apiv::VExecutionContext
{
public:
    ContextImpl(EngineImpl* engine, int32_t strategy)
        : mEngine(engine)
        , mStrategy(strategy)
    {
        mSink.logger = engine->mSink.logger;
        mSink.setRecorder(engine->mSink.recorder);
        mN = engine->mSpec.n; // -1 until setInputShape when dynamic
        std::lock_guard<std::mutex> lock(gMutex);
        mSerial = ++gContextSerial;
        gContexts.push_back(this);
    }
    ~ContextImpl() noexcept override
    {
        if (mModule != nullptr)
        {
            std::string why;
            if (Driver const* d = driver(why))
            {
                // The module belongs to mModuleCtx; unload it there (errors ignored: the
                // context may already be gone at process exit).
                if (d->cuCtxPushCurrent(mModuleCtx) == 0)
                {
                    d->cuModuleUnload(mModule);
                    CUcontext popped = nullptr;
                    d->cuCtxPopCurrent(&popped);
                }
            }
        }
        logf(mSink.logger, ILogger::Severity::kINFO, "stand-in: execution context %" PRId64 " destroyed", mSerial);
        mSink.setRecorder(nullptr);
        std::lock_guard<std::mutex> lock(gMutex);
        forget(gContexts, this);
    }

    IExecutionContext* mPublic{};
    EngineImpl* mEngine;
    Sink mSink;
    int32_t mStrategy;
    int64_t mSerial{};
    std::string mName;
    int64_t mN; // current n, -1 = not set yet
    void* mDeviceMemory{};
    int64_t mDeviceMemorySize{-1}; // -1: setDeviceMemoryV2 never accepted
    void* mAddress[2]{};           // input, output
    int64_t mEnqueueCalls{};
    int64_t mLaunches{};
    int64_t mCapturedEnqueues{};
    CUcontext mModuleCtx{};
    CUmodule mModule{};
    CUfunction mScale{};
    CUfunction mShift{};

    PlanSpec const& spec() const
    {
        return mEngine->mSpec;
    }
    bool shapesKnown() const
    {
        return mN > 0;
    }
    int64_t neededMemory() const
    {
        return spec().deviceMemoryFor(shapesKnown() ? mN : spec().maxN());
    }

    IExecutionContext* getPImpl() noexcept override
    {
        return mPublic;
    }
    void setDebugSync(bool) noexcept override
    {
        mSink.unsupported("VExecutionContext::setDebugSync");
    }
    bool getDebugSync() const noexcept override
    {
        return false;
    }
    void setProfiler(IProfiler*) noexcept override
    {
        mSink.unsupported("VExecutionContext::setProfiler");
    }
    IProfiler* getProfiler() const noexcept override
    {
        return nullptr;
    }
    ICudaEngine const& getEngine() const noexcept override
    {
        return *mEngine->mPublic;
    }
    void setName(char const* name) noexcept override
    {
        mName = name ? name : "";
    }
    char const* getName() const noexcept override
    {
        return mName.c_str();
    }
    void setDeviceMemory(void*) noexcept override
    {
        mSink.error(ErrorCode::kINVALID_STATE,
            "stand-in: IExecutionContext::setDeviceMemory (without a size) is not supported; use setDeviceMemoryV2");
    }
    int32_t getOptimizationProfile() const noexcept override
    {
        return 0;
    }
    bool allInputDimensionsSpecified() const noexcept override
    {
        return shapesKnown();
    }
    void setErrorRecorder(IErrorRecorder* recorder) noexcept override
    {
        mSink.setRecorder(recorder);
    }
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return mSink.recorder;
    }
    bool executeV2(void* const*) noexcept override
    {
        mSink.error(ErrorCode::kUNSUPPORTED_STATE, "stand-in: IExecutionContext::executeV2 is not supported; use enqueueV3");
        return false;
    }
    bool setOptimizationProfileAsync(int32_t profileIndex, cudaStream_t) noexcept override
    {
        if (profileIndex != 0)
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT, "stand-in: optimization profile %d does not exist (the engine has 1)",
                profileIndex);
            return false;
        }
        return true;
    }
    void setEnqueueEmitsProfile(bool) noexcept override
    {
        mSink.unsupported("VExecutionContext::setEnqueueEmitsProfile");
    }
    bool getEnqueueEmitsProfile() const noexcept override
    {
        return false;
    }
    bool reportToProfiler() const noexcept override
    {
        return false;
    }
    bool setInputShape(char const* tensorName, Dims const& dims) noexcept override
    {
        int32_t i = mEngine->index(tensorName, "IExecutionContext::setInputShape");
        if (i < 0)
        {
            return false;
        }
        if (i != 0)
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT, "stand-in: setInputShape: `%s` is an output", tensorName);
            return false;
        }
        PlanSpec const& s = spec();
        int64_t lo = s.n < 0 ? s.nMin : s.n;
        int64_t hi = s.n < 0 ? s.nMax : s.n;
        if (dims.nbDims != 2 || dims.d[0] != 1 || dims.d[1] < lo || dims.d[1] > hi)
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT,
                "stand-in: setInputShape: `%s` takes [1, n] with n in [%" PRId64 ", %" PRId64 "], got %s", tensorName,
                lo, hi, dimsText(dims).c_str());
            return false;
        }
        std::lock_guard<std::mutex> lock(gMutex);
        mN = dims.d[1];
        return true;
    }
    Dims getTensorShape(char const* tensorName) const noexcept override
    {
        if (mEngine->index(tensorName, "IExecutionContext::getTensorShape") < 0)
        {
            return invalidDims();
        }
        return dims2(1, shapesKnown() ? mN : -1);
    }
    Dims getTensorStrides(char const* tensorName) const noexcept override
    {
        if (mEngine->index(tensorName, "IExecutionContext::getTensorStrides") < 0)
        {
            return invalidDims();
        }
        return dims2(shapesKnown() ? mN : -1, 1);
    }
    bool bindAddress(char const* tensorName, void* data, int32_t want, char const* method)
    {
        int32_t i = mEngine->index(tensorName, method);
        if (i < 0)
        {
            return false;
        }
        if (want >= 0 && i != want)
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT, "stand-in: %s: `%s` is an %s", method, tensorName,
                i == 0 ? "input" : "output");
            return false;
        }
        if (reinterpret_cast<uintptr_t>(data) % kAlign != 0)
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT,
                "stand-in: %s: address %p of `%s` is not 256-byte aligned (TensorRT requires 256)", method, data,
                tensorName);
            return false;
        }
        std::lock_guard<std::mutex> lock(gMutex);
        mAddress[i] = data;
        return true;
    }
    bool setTensorAddress(char const* tensorName, void* data) noexcept override
    {
        return bindAddress(tensorName, data, -1, "IExecutionContext::setTensorAddress");
    }
    void const* getTensorAddress(char const* tensorName) const noexcept override
    {
        int32_t i = mEngine->index(tensorName, "IExecutionContext::getTensorAddress");
        return i < 0 ? nullptr : mAddress[i];
    }
    bool setInputTensorAddress(char const* tensorName, void const* data) noexcept override
    {
        return bindAddress(tensorName, const_cast<void*>(data), 0, "IExecutionContext::setInputTensorAddress");
    }
    bool setOutputTensorAddress(char const* tensorName, void* data) noexcept override
    {
        return bindAddress(tensorName, data, 1, "IExecutionContext::setOutputTensorAddress");
    }
    int32_t inferShapes(int32_t nbMaxNames, char const** tensorNames) noexcept override
    {
        if (shapesKnown())
        {
            return 0;
        }
        if (nbMaxNames > 0 && tensorNames != nullptr)
        {
            tensorNames[0] = spec().input.c_str();
        }
        return 1;
    }
    bool setInputConsumedEvent(cudaEvent_t) noexcept override
    {
        mSink.unsupported("VExecutionContext::setInputConsumedEvent");
        return false;
    }
    cudaEvent_t getInputConsumedEvent() const noexcept override
    {
        return nullptr;
    }
    void* getOutputTensorAddress(char const* tensorName) const noexcept override
    {
        int32_t i = mEngine->index(tensorName, "IExecutionContext::getOutputTensorAddress");
        return i == 1 ? mAddress[1] : nullptr;
    }
    bool setOutputAllocator(char const*, IOutputAllocator*) noexcept override
    {
        mSink.unsupported("VExecutionContext::setOutputAllocator");
        return false;
    }
    IOutputAllocator* getOutputAllocator(char const*) noexcept override
    {
        return nullptr;
    }
    int64_t getMaxOutputSize(char const* tensorName) const noexcept override
    {
        return mEngine->index(tensorName, "IExecutionContext::getMaxOutputSize") == 1 ? spec().maxN() * 4 : -1;
    }
    bool setTemporaryStorageAllocator(IGpuAllocator*) noexcept override
    {
        mSink.unsupported("VExecutionContext::setTemporaryStorageAllocator");
        return false;
    }
    IGpuAllocator* getTemporaryStorageAllocator() const noexcept override
    {
        return nullptr;
    }
    bool enqueueV3(cudaStream_t stream) noexcept override;
    void setPersistentCacheLimit(size_t) noexcept override {}
    size_t getPersistentCacheLimit() const noexcept override
    {
        return 0;
    }
    bool setNvtxVerbosity(ProfilingVerbosity) noexcept override
    {
        return true;
    }
    ProfilingVerbosity getNvtxVerbosity() const noexcept override
    {
        return ProfilingVerbosity::kLAYER_NAMES_ONLY;
    }
    void setAuxStreams(cudaStream_t*, int32_t nbStreams) noexcept override
    {
        if (nbStreams > 0)
        {
            mSink.unsupported("VExecutionContext::setAuxStreams (the stand-in uses no auxiliary stream)");
        }
    }
    bool setDebugListener(IDebugListener*) noexcept override
    {
        mSink.unsupported("VExecutionContext::setDebugListener");
        return false;
    }
    IDebugListener* getDebugListener() noexcept override
    {
        return nullptr;
    }
    bool setTensorDebugState(char const*, bool) noexcept override
    {
        mSink.unsupported("VExecutionContext::setTensorDebugState");
        return false;
    }
    bool getDebugState(char const*) const noexcept override
    {
        return false;
    }
    bool setAllTensorsDebugState(bool) noexcept override
    {
        mSink.unsupported("VExecutionContext::setAllTensorsDebugState");
        return false;
    }
    size_t updateDeviceMemorySizeForShapes() noexcept override
    {
        if (!shapesKnown())
        {
            mSink.error(ErrorCode::kINVALID_STATE,
                "stand-in: updateDeviceMemorySizeForShapes: the shape of input `%s` is not set",
                spec().input.c_str());
            return 0;
        }
        return static_cast<size_t>(neededMemory());
    }
    void setDeviceMemoryV2(void* memory, int64_t size) noexcept override
    {
        int64_t needed = neededMemory();
        if (size < needed)
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT,
                "stand-in: setDeviceMemoryV2: %" PRId64 " bytes at %p are fewer than the %" PRId64 " the context needs",
                size, memory, needed);
            return;
        }
        if (memory == nullptr || reinterpret_cast<uintptr_t>(memory) % kAlign != 0)
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT,
                "stand-in: setDeviceMemoryV2: address %p is null or not 256-byte aligned", memory);
            return;
        }
        std::lock_guard<std::mutex> lock(gMutex);
        mDeviceMemory = memory;
        mDeviceMemorySize = size;
    }
    IRuntimeConfig* getRuntimeConfig() const noexcept override
    {
        return nullptr;
    }
    bool setUnfusedTensorsDebugState(bool) noexcept override
    {
        mSink.unsupported("VExecutionContext::setUnfusedTensorsDebugState");
        return false;
    }
    bool getUnfusedTensorsDebugState() const noexcept override
    {
        return false;
    }
    bool setCommunicator(void*) noexcept override
    {
        mSink.unsupported("VExecutionContext::setCommunicator");
        return false;
    }

private:
    bool loadKernels(Driver const& d, CUcontext ctx);
};

IExecutionContext* EngineImpl::createExecutionContext(ExecutionContextAllocationStrategy strategy) noexcept
{
    int32_t raw = static_cast<int32_t>(strategy);
    if (raw != kUserManaged)
    {
        mSink.error(ErrorCode::kINVALID_ARGUMENT,
            "stand-in: createExecutionContext: allocation strategy %d is not supported (the stand-in never allocates "
            "device memory: kUSER_MANAGED = %d only)",
            raw, kUserManaged);
        return nullptr;
    }
    auto* impl = new ContextImpl(this, raw);
    auto* pub = new ContextPublic(impl);
    impl->mPublic = pub;
    logf(mSink.logger, ILogger::Severity::kINFO, "stand-in: execution context %" PRId64 " of engine `%s` created (kUSER_MANAGED)",
        impl->mSerial, mSpec.name.c_str());
    return pub;
}

bool ContextImpl::loadKernels(Driver const& d, CUcontext ctx)
{
    char log[2048] = {};
    int options[2] = {kJitErrorLogBuffer, kJitErrorLogBufferSize};
    void* values[2] = {log, reinterpret_cast<void*>(static_cast<uintptr_t>(sizeof(log)))};
    CUresult rc = d.cuCtxPushCurrent(ctx);
    if (rc != 0)
    {
        mSink.error(ErrorCode::kFAILED_EXECUTION, "stand-in: enqueueV3: cuCtxPushCurrent failed: %s", d.name(rc).c_str());
        return false;
    }
    CUmodule module = nullptr;
    rc = d.cuModuleLoadDataEx(&module, kPtx, 2, options, values);
    CUfunction scale = nullptr;
    CUfunction shift = nullptr;
    CUresult rc2 = 0;
    if (rc == 0)
    {
        rc2 = d.cuModuleGetFunction(&scale, module, "standin_scale");
        if (rc2 == 0)
        {
            rc2 = d.cuModuleGetFunction(&shift, module, "standin_shift");
        }
        if (rc2 != 0)
        {
            d.cuModuleUnload(module);
        }
    }
    CUcontext popped = nullptr;
    d.cuCtxPopCurrent(&popped);
    if (rc != 0)
    {
        mSink.error(ErrorCode::kFAILED_INITIALIZATION, "stand-in: enqueueV3: loading the kernel PTX failed: %s; JIT log: %s",
            d.name(rc).c_str(), log);
        return false;
    }
    if (rc2 != 0)
    {
        mSink.error(ErrorCode::kFAILED_INITIALIZATION, "stand-in: enqueueV3: cuModuleGetFunction failed: %s",
            d.name(rc2).c_str());
        return false;
    }
    mModuleCtx = ctx;
    mModule = module;
    mScale = scale;
    mShift = shift;
    logf(mSink.logger, ILogger::Severity::kINFO, "stand-in: execution context %" PRId64 ": kernels loaded (PTX JIT)", mSerial);
    return true;
}

bool ContextImpl::enqueueV3(cudaStream_t stream) noexcept
{
    std::lock_guard<std::mutex> lock(gMutex);
    ++mEnqueueCalls;
    PlanSpec const& s = spec();
    if (!shapesKnown())
    {
        mSink.error(ErrorCode::kINVALID_STATE, "stand-in: enqueueV3: the shape of input `%s` is not set", s.input.c_str());
        return false;
    }
    int64_t needed = neededMemory();
    if (mDeviceMemorySize < needed)
    {
        mSink.error(ErrorCode::kINVALID_STATE,
            "stand-in: enqueueV3: no device memory of %" PRId64 " bytes was given (setDeviceMemoryV2 accepted %" PRId64 ")",
            needed, mDeviceMemorySize < 0 ? int64_t{0} : mDeviceMemorySize);
        return false;
    }
    for (int i = 0; i < 2; ++i)
    {
        if (mAddress[i] == nullptr)
        {
            mSink.error(ErrorCode::kINVALID_STATE, "stand-in: enqueueV3: %s `%s` has no address (setTensorAddress)",
                i == 0 ? "input" : "output", (i == 0 ? s.input : s.output).c_str());
            return false;
        }
    }
    std::string why;
    Driver const* d = driver(why);
    if (d == nullptr)
    {
        mSink.error(ErrorCode::kFAILED_EXECUTION, "stand-in: enqueueV3: %s", why.c_str());
        return false;
    }
    int status = kCaptureStatusNone;
    CUresult rc = d->cuStreamIsCapturing(stream, &status);
    if (rc != 0)
    {
        mSink.error(ErrorCode::kFAILED_EXECUTION, "stand-in: enqueueV3: cuStreamIsCapturing(stream %p) failed: %s",
            static_cast<void*>(stream), d->name(rc).c_str());
        return false;
    }
    if (status != kCaptureStatusNone && status != kCaptureStatusActive)
    {
        mSink.error(ErrorCode::kFAILED_EXECUTION, "stand-in: enqueueV3: the capture on stream %p was invalidated",
            static_cast<void*>(stream));
        return false;
    }
    bool capturing = status == kCaptureStatusActive;
    CUcontext ctx = nullptr;
    rc = stream != nullptr ? d->cuStreamGetCtx(stream, &ctx) : d->cuCtxGetCurrent(&ctx);
    if (rc != 0 || ctx == nullptr)
    {
        mSink.error(ErrorCode::kFAILED_EXECUTION, "stand-in: enqueueV3: no CUDA context for stream %p: %s",
            static_cast<void*>(stream), rc != 0 ? d->name(rc).c_str() : "no current context");
        return false;
    }
    if (mModule == nullptr)
    {
        if (capturing)
        {
            mSink.error(ErrorCode::kINVALID_STATE,
                "stand-in: enqueueV3: the first enqueue of an execution context loads its kernels, which is illegal "
                "under CUDA graph capture (as TensorRT's first enqueue is): run one enqueueV3 eagerly first");
            return false;
        }
        if (!loadKernels(*d, ctx))
        {
            return false;
        }
    }
    else if (ctx != mModuleCtx)
    {
        mSink.error(ErrorCode::kINVALID_ARGUMENT,
            "stand-in: enqueueV3: stream %p belongs to CUDA context %p, but this execution context runs on %p",
            static_cast<void*>(stream), static_cast<void*>(ctx), static_cast<void*>(mModuleCtx));
        return false;
    }
    CUcontext current = nullptr;
    d->cuCtxGetCurrent(&current);
    bool pushed = false;
    if (current != ctx)
    {
        rc = d->cuCtxPushCurrent(ctx);
        if (rc != 0)
        {
            mSink.error(ErrorCode::kFAILED_EXECUTION, "stand-in: enqueueV3: cuCtxPushCurrent failed: %s", d->name(rc).c_str());
            return false;
        }
        pushed = true;
    }
    CUdeviceptr x = reinterpret_cast<CUdeviceptr>(mAddress[0]);
    CUdeviceptr y = reinterpret_cast<CUdeviceptr>(mAddress[1]);
    CUdeviceptr ws = reinterpret_cast<CUdeviceptr>(mDeviceMemory);
    float a = s.a;
    float b = s.b;
    int n = static_cast<int>(mN);
    unsigned grid = static_cast<unsigned>((mN + kBlock - 1) / kBlock);
    void* scaleArgs[] = {&x, &ws, &a, &n};
    void* shiftArgs[] = {&ws, &y, &b, &n};
    rc = d->cuLaunchKernel(mScale, grid, 1, 1, kBlock, 1, 1, 0, stream, scaleArgs, nullptr);
    CUresult rc2 = rc == 0 ? d->cuLaunchKernel(mShift, grid, 1, 1, kBlock, 1, 1, 0, stream, shiftArgs, nullptr) : 0;
    if (pushed)
    {
        CUcontext popped = nullptr;
        d->cuCtxPopCurrent(&popped);
    }
    if (rc != 0 || rc2 != 0)
    {
        mSink.error(ErrorCode::kFAILED_EXECUTION, "stand-in: enqueueV3: cuLaunchKernel(%s) failed on stream %p%s: %s",
            rc != 0 ? "standin_scale" : "standin_shift", static_cast<void*>(stream), capturing ? " (capturing)" : "",
            d->name(rc != 0 ? rc : rc2).c_str());
        return false;
    }
    mLaunches += 2;
    if (capturing)
    {
        ++mCapturedEnqueues;
    }
    return true;
}

// ---------------------------------------------------------------------------------------
// The runtime.

class RuntimeImpl final : public apiv::VRuntime
{
public:
    explicit RuntimeImpl(ILogger* logger)
    {
        mSink.logger = logger;
        std::lock_guard<std::mutex> lock(gMutex);
        gRuntimes.push_back(this);
    }
    ~RuntimeImpl() noexcept override
    {
        logf(mSink.logger, ILogger::Severity::kINFO, "stand-in: runtime destroyed");
        mSink.setRecorder(nullptr);
        std::lock_guard<std::mutex> lock(gMutex);
        forget(gRuntimes, this);
    }

    IRuntime* mPublic{};
    Sink mSink;
    bool mHostCodeAllowed{false};
    int32_t mDlaCore{-1};
    int32_t mMaxThreads{1};
    std::string mTempDir;
    TempfileControlFlags mTempfileFlags{0};
    int64_t mDeserializeCalls{};

    IRuntime* getPImpl() noexcept override
    {
        return mPublic;
    }
    ICudaEngine* deserializeCudaEngine(void const* blob, std::size_t size) noexcept override
    {
        ++mDeserializeCalls;
        PlanSpec spec;
        std::string why;
        if (!parsePlan(blob, size, spec, why))
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT, "stand-in: deserializeCudaEngine: %s", why.c_str());
            return nullptr;
        }
        int32_t planMajor = spec.tensorrt / 10000;
        if (kLean && !spec.versionCompatible)
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT,
                "stand-in: deserializeCudaEngine: the lean runtime deserializes version-compatible plans only; `%s` is not "
                "(version_compatible 0)",
                spec.name.c_str());
            return nullptr;
        }
        if (spec.versionCompatible)
        {
            bool supported = spec.tensorrt <= kLibVersion && (planMajor == NV_TENSORRT_MAJOR || planMajor == NV_TENSORRT_MAJOR - 1);
            if (!supported)
            {
                mSink.error(ErrorCode::kINVALID_ARGUMENT,
                    "stand-in: deserializeCudaEngine: version-compatible plan `%s` was built by %d, which library %d "
                    "cannot run",
                    spec.name.c_str(), spec.tensorrt, kLibVersion);
                return nullptr;
            }
            if (!mHostCodeAllowed)
            {
                mSink.error(ErrorCode::kINVALID_STATE,
                    "stand-in: deserializeCudaEngine: plan `%s` is version-compatible and embeds host code, but "
                    "setEngineHostCodeAllowed(true) was not called",
                    spec.name.c_str());
                return nullptr;
            }
        }
        else if (spec.tensorrt != kLibVersion)
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT,
                "stand-in: deserializeCudaEngine: plan `%s` was built by %d but this library is %d (plans are not "
                "version-compatible by default)",
                spec.name.c_str(), spec.tensorrt, kLibVersion);
            return nullptr;
        }
        auto* impl = new EngineImpl(std::move(spec), mSink.logger, mSink.recorder);
        auto* pub = new EnginePublic(impl);
        impl->mPublic = pub;
        PlanSpec const& s = impl->mSpec;
        logf(mSink.logger, ILogger::Severity::kINFO,
            "stand-in: deserialized stand-in plan `%s` (%zu bytes): %s [1, %" PRId64 "] -> %s, y = %g*x + %g, device memory %"
            PRId64 " bytes",
            s.name.c_str(), size, s.input.c_str(), s.n, s.output.c_str(), static_cast<double>(s.a),
            static_cast<double>(s.b), impl->getDeviceMemorySizeV2());
        return pub;
    }
    void setDLACore(int32_t dlaCore) noexcept override
    {
        if (dlaCore >= 0)
        {
            mSink.error(ErrorCode::kINVALID_ARGUMENT, "stand-in: setDLACore(%d): the stand-in has no DLA", dlaCore);
        }
    }
    int32_t getDLACore() const noexcept override
    {
        return mDlaCore;
    }
    int32_t getNbDLACores() const noexcept override
    {
        return 0;
    }
    void setGpuAllocator(IGpuAllocator*) noexcept override
    {
        mSink.unsupported("VRuntime::setGpuAllocator (the stand-in allocates nothing)");
    }
    void setErrorRecorder(IErrorRecorder* recorder) noexcept override
    {
        if (recorder != nullptr)
        {
            // What TensorRT checks of an application's interface: kind and version.
            InterfaceInfo info = recorder->getInterfaceInfo();
            APILanguage lang = recorder->getAPILanguage();
            if (info.kind == nullptr || std::strcmp(info.kind, "IErrorRecorder") != 0 || info.major != 1
                || lang != APILanguage::kCPP)
            {
                logf(mSink.logger, ILogger::Severity::kERROR,
                    "stand-in: setErrorRecorder: the recorder reports interface `%s` %d.%d, language %d; expected "
                    "IErrorRecorder 1.x, C++ (0)",
                    info.kind ? info.kind : "(null)", info.major, info.minor, static_cast<int>(lang));
                return;
            }
        }
        mSink.setRecorder(recorder);
    }
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return mSink.recorder;
    }
    ILogger* getLogger() const noexcept override
    {
        return mSink.logger;
    }
    bool setMaxThreads(int32_t maxThreads) noexcept override
    {
        if (maxThreads < 1)
        {
            return false;
        }
        mMaxThreads = maxThreads;
        return true;
    }
    int32_t getMaxThreads() const noexcept override
    {
        return mMaxThreads;
    }
    void setTemporaryDirectory(char const* path) noexcept override
    {
        mTempDir = path ? path : "";
    }
    char const* getTemporaryDirectory() const noexcept override
    {
        return mTempDir.empty() ? nullptr : mTempDir.c_str();
    }
    void setTempfileControlFlags(TempfileControlFlags flags) noexcept override
    {
        mTempfileFlags = flags;
    }
    TempfileControlFlags getTempfileControlFlags() const noexcept override
    {
        return mTempfileFlags;
    }
    IPluginRegistry& getPluginRegistry() noexcept override
    {
        return gPluginRegistry;
    }
    void setPluginRegistryParent(IPluginRegistry*) noexcept override
    {
        mSink.unsupported("VRuntime::setPluginRegistryParent");
    }
    IRuntime* loadRuntime(char const*) noexcept override
    {
        mSink.unsupported("VRuntime::loadRuntime");
        return nullptr;
    }
    void setEngineHostCodeAllowed(bool allowed) noexcept override
    {
        std::lock_guard<std::mutex> lock(gMutex);
        mHostCodeAllowed = allowed;
    }
    bool getEngineHostCodeAllowed() const noexcept override
    {
        return mHostCodeAllowed;
    }
    ICudaEngine* deserializeCudaEngineV2(IStreamReaderV2&) noexcept override
    {
        mSink.error(ErrorCode::kUNSUPPORTED_STATE,
            "stand-in: deserializeCudaEngine(IStreamReaderV2&) is not supported; pass the plan bytes");
        return nullptr;
    }
    bool setDLAWorkspaceAllocationStrategy(DLAWorkspaceAllocationStrategy) noexcept override
    {
        mSink.unsupported("VRuntime::setDLAWorkspaceAllocationStrategy");
        return false;
    }
    DLAWorkspaceAllocationStrategy getDLAWorkspaceAllocationStrategy() const noexcept override
    {
        return DLAWorkspaceAllocationStrategy::kDEFAULT;
    }
};

// ---------------------------------------------------------------------------------------
// The report.

void appendf(std::string& out, char const* fmt, ...) __attribute__((format(printf, 2, 3)));
void appendf(std::string& out, char const* fmt, ...)
{
    std::va_list args;
    va_start(args, fmt);
    out += format(fmt, args);
    va_end(args);
}

std::string report()
{
    std::lock_guard<std::mutex> lock(gMutex);
    std::string out;
    appendf(out, "identity %s\n", kIdentity);
    appendf(out, "flavor %s\n", kLean ? "lean" : "standard");
    appendf(out, "version %d\n", kLibVersion);
    appendf(out, "runtimes.alive %zu\n", gRuntimes.size());
    appendf(out, "engines.alive %zu\n", gEngines.size());
    appendf(out, "contexts.alive %zu\n", gContexts.size());
    if (!gRuntimes.empty())
    {
        RuntimeImpl const* r = gRuntimes.back();
        appendf(out, "runtime.host_code_allowed %d\n", r->mHostCodeAllowed ? 1 : 0);
        appendf(out, "runtime.error_recorder 0x%" PRIxPTR "\n", reinterpret_cast<uintptr_t>(r->mSink.recorder));
        appendf(out, "runtime.deserialize_calls %" PRId64 "\n", r->mDeserializeCalls);
    }
    if (!gEngines.empty())
    {
        EngineImpl const* e = gEngines.back();
        appendf(out, "engine.name %s\n", e->mSpec.name.c_str());
        appendf(out, "engine.error_recorder 0x%" PRIxPTR "\n", reinterpret_cast<uintptr_t>(e->mSink.recorder));
    }
    if (!gContexts.empty())
    {
        ContextImpl const* c = gContexts.back();
        appendf(out, "context.serial %" PRId64 "\n", c->mSerial);
        appendf(out, "context.strategy %d\n", c->mStrategy);
        appendf(out, "context.error_recorder 0x%" PRIxPTR "\n", reinterpret_cast<uintptr_t>(c->mSink.recorder));
        appendf(out, "context.n %" PRId64 "\n", c->mN);
        appendf(out, "context.device_memory 0x%" PRIxPTR "\n", reinterpret_cast<uintptr_t>(c->mDeviceMemory));
        appendf(out, "context.device_memory_size %" PRId64 "\n", c->mDeviceMemorySize);
        appendf(out, "context.tensor.%s 0x%" PRIxPTR "\n", c->spec().input.c_str(),
            reinterpret_cast<uintptr_t>(c->mAddress[0]));
        appendf(out, "context.tensor.%s 0x%" PRIxPTR "\n", c->spec().output.c_str(),
            reinterpret_cast<uintptr_t>(c->mAddress[1]));
        appendf(out, "context.enqueue_calls %" PRId64 "\n", c->mEnqueueCalls);
        appendf(out, "context.kernel_launches %" PRId64 "\n", c->mLaunches);
        appendf(out, "context.captured_enqueues %" PRId64 "\n", c->mCapturedEnqueues);
        appendf(out, "context.kernels_loaded %d\n", c->mModule != nullptr ? 1 : 0);
    }
    return out;
}

} // namespace

// ---------------------------------------------------------------------------------------
// Exported entry points (the names and signatures of NvInferRuntime.h / NvInferRuntimeBase.h
// / NvInfer.h).

extern "C" TENSORRTAPI void* createInferRuntime_INTERNAL(void* logger, int32_t version) noexcept
{
    auto* log = static_cast<ILogger*>(logger);
    if (log == nullptr)
    {
        return nullptr;
    }
    // What TensorRT checks of an application's logger: kind and version.
    InterfaceInfo info = log->getInterfaceInfo();
    if (info.kind == nullptr || std::strcmp(info.kind, "ILogger") != 0 || info.major != 1)
    {
        log->log(ILogger::Severity::kERROR, "stand-in: createInferRuntime: the logger does not report ILogger 1.x");
        return nullptr;
    }
    if (version / 10000 != NV_TENSORRT_MAJOR)
    {
        logf(log, ILogger::Severity::kERROR,
            "stand-in: createInferRuntime: the application was built for TensorRT %d but this library is %d", version,
            kLibVersion);
        return nullptr;
    }
    auto* impl = new RuntimeImpl(log);
    auto* pub = new RuntimePublic(impl);
    impl->mPublic = pub;
    logf(log, ILogger::Severity::kWARNING,
        "stand-in: %s %d.%d.%d (%s flavour) runtime created: it runs TSTANDIN plans only and proves the caller's side of "
        "the calls, not TensorRT's",
        kIdentity, NV_TENSORRT_MAJOR, NV_TENSORRT_MINOR, NV_TENSORRT_PATCH, kLean ? "lean" : "standard");
    return pub;
}

#ifndef TETHER_STANDIN_LEAN
// Present in the standard runtime only (tether tells the flavours apart by it).
extern "C" TENSORRTAPI void* createInferBuilder_INTERNAL(void* logger, int32_t) noexcept
{
    logf(static_cast<ILogger*>(logger), ILogger::Severity::kERROR, "stand-in: there is no builder in %s", kIdentity);
    return nullptr;
}
#endif

extern "C" TENSORRTAPI int32_t getInferLibVersion() noexcept
{
    return kLibVersion;
}
extern "C" TENSORRTAPI int32_t getInferLibMajorVersion() noexcept
{
    return NV_TENSORRT_MAJOR;
}
extern "C" TENSORRTAPI int32_t getInferLibMinorVersion() noexcept
{
    return NV_TENSORRT_MINOR;
}
extern "C" TENSORRTAPI int32_t getInferLibPatchVersion() noexcept
{
    return NV_TENSORRT_PATCH;
}
extern "C" TENSORRTAPI int32_t getInferLibBuildVersion() noexcept
{
    return NV_TENSORRT_BUILD;
}

//! For tests: a text snapshot of the stand-in's state, one `key value` per line (see
//! report()). Writes at most `capacity` bytes including the NUL into `buffer` (when not null)
//! and returns the full length without the NUL, like snprintf.
extern "C" __attribute__((visibility("default"))) size_t tether_standin_report(char* buffer, size_t capacity) noexcept
{
    std::string r = report();
    if (buffer != nullptr && capacity > 0)
    {
        std::size_t n = r.size() < capacity - 1 ? r.size() : capacity - 1;
        std::memcpy(buffer, r.data(), n);
        buffer[n] = '\0';
    }
    return r.size();
}
