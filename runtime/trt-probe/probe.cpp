// tether TensorRT ABI probe.
//
// Compiled by `runtime/tests/trt_abi.rs` with g++ against one set of the
// official TensorRT headers (fetched by `fetch-headers.sh`, never committed)
// and the stub `stub/cuda_runtime_api.h`. It needs no TensorRT library and no
// CUDA: it only reads what the compiler knows about the classes.
//
// Output: one fact per line, `<kind> <name> <value>`:
//   version  TensorRT                  MAJOR.MINOR.PATCH.BUILD
//   const    <name>                    integer
//   slot     <Class>.<method>          vtable index | absent | nonvirtual
//   dtor     <Class>.complete|deleting vtable index | none
//   size     <Type>                    bytes
//   offset   <Type>.<member>           bytes
//   enum     <Enum>.<enumerator>       integer | absent
//
// How a slot index is read (Itanium C++ ABI, section 2.3 "Member Pointers"):
// a pointer to a virtual member function is the pair {ptr, adj} where
// ptr = 1 + (byte offset of the function's entry in the vtable). So the slot
// index is (ptr - 1) / sizeof(void*). A non-virtual member function pointer
// holds the function's address instead (even), reported as `nonvirtual`.
//
// Destructor slots cannot be named by a member pointer, so they are found by
// calling each vtable entry of a probe subclass whose destructor sets a flag
// and whose class-specific operator delete sets another (the deleting
// destructor calls it). Every other virtual of those probe subclasses ignores
// its arguments, so calling it through a `void(*)(void*)` is harmless.

#include <NvInfer.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <new>

namespace
{

template <typename PM>
long slotOf(PM pm)
{
    static_assert(sizeof(PM) == 2 * sizeof(std::ptrdiff_t), "unexpected member function pointer size");
    std::ptrdiff_t raw[2];
    std::memcpy(raw, &pm, sizeof(raw));
    if ((raw[0] & 1) == 0)
    {
        return -1;
    }
    return static_cast<long>((raw[0] - 1) / static_cast<std::ptrdiff_t>(sizeof(void*)));
}

template <typename PD>
long dataOffsetOf(PD pd)
{
    static_assert(sizeof(PD) == sizeof(std::ptrdiff_t), "unexpected data member pointer size");
    std::ptrdiff_t raw;
    std::memcpy(&raw, &pd, sizeof(raw));
    return static_cast<long>(raw);
}

void emitSlot(char const* cls, char const* method, long slot)
{
    if (slot < 0)
    {
        std::printf("slot %s.%s nonvirtual\n", cls, method);
    }
    else
    {
        std::printf("slot %s.%s %ld\n", cls, method, slot);
    }
}

void emitAbsent(char const* cls, char const* method)
{
    std::printf("slot %s.%s absent\n", cls, method);
}

// Flags set by the probe subclasses' destructors and operator delete.
bool gDestroyed = false;
bool gDeleted = false;

// Calls every entry 0..count-1 of the vtable of a `P` constructed in a local
// buffer and reports which entries behaved as the complete-object destructor
// (destroyed, not deleted) and the deleting destructor (destroyed and deleted).
template <typename P>
void findDestructors(char const* name, int count)
{
    long complete = -1;
    long deleting = -1;
    alignas(P) unsigned char storage[sizeof(P)];
    for (int k = 0; k < count; ++k)
    {
        P* object = new (storage) P();
        void** vtable = *reinterpret_cast<void***>(object);
        gDestroyed = false;
        gDeleted = false;
        auto entry = reinterpret_cast<void (*)(void*)>(vtable[k]);
        entry(object);
        if (gDestroyed && !gDeleted)
        {
            complete = k;
        }
        else if (gDestroyed && gDeleted)
        {
            deleting = k;
        }
    }
    if (complete < 0)
    {
        std::printf("dtor %s.complete none\n", name);
    }
    else
    {
        std::printf("dtor %s.complete %ld\n", name, complete);
    }
    if (deleting < 0)
    {
        std::printf("dtor %s.deleting none\n", name);
    }
    else
    {
        std::printf("dtor %s.deleting %ld\n", name, deleting);
    }
}

#define TETHER_PROBE_DELETE                                                                                            \
    static void operator delete(void*) noexcept                                                                        \
    {                                                                                                                  \
        gDeleted = true;                                                                                               \
    }

// The application-implemented interfaces, with no-op bodies.
struct ProbeLogger final : nvinfer1::ILogger
{
    void log(Severity, nvinfer1::AsciiChar const*) noexcept override {}
    ~ProbeLogger() noexcept override
    {
        gDestroyed = true;
    }
    TETHER_PROBE_DELETE
};

struct ProbeErrorRecorder final : nvinfer1::IErrorRecorder
{
    int32_t getNbErrors() const noexcept override
    {
        return 0;
    }
    nvinfer1::ErrorCode getErrorCode(int32_t) const noexcept override
    {
        return nvinfer1::ErrorCode::kSUCCESS;
    }
    ErrorDesc getErrorDesc(int32_t) const noexcept override
    {
        return "";
    }
    bool hasOverflowed() const noexcept override
    {
        return false;
    }
    void clear() noexcept override {}
    bool reportError(nvinfer1::ErrorCode, ErrorDesc) noexcept override
    {
        return false;
    }
    RefCount incRefCount() noexcept override
    {
        return 0;
    }
    RefCount decRefCount() noexcept override
    {
        return 0;
    }
    ~ProbeErrorRecorder() noexcept override
    {
        gDestroyed = true;
    }
    TETHER_PROBE_DELETE
};

// The root of the library-implemented `apiv` tables: it declares only the
// virtual destructor, so its vtable is the two destructor entries.
struct ProbeRoot final : nvinfer1::apiv::VRoot
{
    ~ProbeRoot() noexcept override
    {
        gDestroyed = true;
    }
    TETHER_PROBE_DELETE
};

// The public wrapper classes: [vptr][mImpl], vtable = two destructors.
struct ProbeRuntime final : nvinfer1::IRuntime
{
    ~ProbeRuntime() noexcept override
    {
        gDestroyed = true;
    }
    static long implOffset()
    {
        return dataOffsetOf(&ProbeRuntime::mImpl);
    }
    TETHER_PROBE_DELETE
};

struct ProbeEngine final : nvinfer1::ICudaEngine
{
    ~ProbeEngine() noexcept override
    {
        gDestroyed = true;
    }
    static long implOffset()
    {
        return dataOffsetOf(&ProbeEngine::mImpl);
    }
    TETHER_PROBE_DELETE
};

struct ProbeContext final : nvinfer1::IExecutionContext
{
    ~ProbeContext() noexcept override
    {
        gDestroyed = true;
    }
    static long implOffset()
    {
        return dataOffsetOf(&ProbeContext::mImpl);
    }
    TETHER_PROBE_DELETE
};

} // namespace

// Slot of CLS::METHOD in namespace NS, or `absent` when the headers lack it
// (or it is overloaded: use TETHER_SLOT_SIG then). Evaluates to 1 when the
// method exists, else 0.
#define TETHER_SLOT(NS, CLS, METHOD)                                                                                   \
    []<typename T>() {                                                                                                 \
        if constexpr (requires { &T::METHOD; })                                                                        \
        {                                                                                                              \
            emitSlot(#CLS, #METHOD, slotOf(&T::METHOD));                                                               \
            return 1;                                                                                                  \
        }                                                                                                              \
        else                                                                                                           \
        {                                                                                                              \
            emitAbsent(#CLS, #METHOD);                                                                                 \
            return 0;                                                                                                  \
        }                                                                                                              \
    }.template operator()<NS::CLS>()

// Same, for the overload of METHOD whose function type is SIG.
#define TETHER_SLOT_SIG(NS, CLS, METHOD, SIG)                                                                          \
    []<typename T>() {                                                                                                 \
        using Sig = SIG;                                                                                               \
        if constexpr (requires { static_cast<Sig T::*>(&T::METHOD); })                                                 \
        {                                                                                                              \
            emitSlot(#CLS, #METHOD, slotOf(static_cast<Sig T::*>(&T::METHOD)));                                        \
            return 1;                                                                                                  \
        }                                                                                                              \
        else                                                                                                           \
        {                                                                                                              \
            emitAbsent(#CLS, #METHOD);                                                                                 \
            return 0;                                                                                                  \
        }                                                                                                              \
    }.template operator()<NS::CLS>()

#define TETHER_ENUM(ENUM, NAME)                                                                                        \
    []<typename E>() {                                                                                                 \
        if constexpr (requires { E::NAME; })                                                                           \
        {                                                                                                              \
            std::printf("enum %s.%s %ld\n", #ENUM, #NAME, static_cast<long>(E::NAME));                                 \
        }                                                                                                              \
        else                                                                                                           \
        {                                                                                                              \
            std::printf("enum %s.%s absent\n", #ENUM, #NAME);                                                          \
        }                                                                                                              \
    }.template operator()<nvinfer1::ENUM>()

int main()
{
    using nvinfer1::Dims64;
    using nvinfer1::InterfaceInfo;

    std::printf("version TensorRT %d.%d.%d.%d\n", NV_TENSORRT_MAJOR, NV_TENSORRT_MINOR, NV_TENSORRT_PATCH,
        NV_TENSORRT_BUILD);
    std::printf("const NV_TENSORRT_VERSION %ld\n", static_cast<long>(NV_TENSORRT_VERSION));
    std::printf("const Dims64.MAX_DIMS %d\n", static_cast<int>(Dims64::MAX_DIMS));
    std::printf("const IErrorRecorder.kMAX_DESC_LENGTH %ld\n",
        static_cast<long>(nvinfer1::IErrorRecorder::kMAX_DESC_LENGTH));

    // Value types crossing the boundary.
    std::printf("size Dims64 %zu\n", sizeof(Dims64));
    std::printf("offset Dims64.nbDims %zu\n", offsetof(Dims64, nbDims));
    std::printf("offset Dims64.d %zu\n", offsetof(Dims64, d));
    std::printf("size InterfaceInfo %zu\n", sizeof(InterfaceInfo));
    std::printf("offset InterfaceInfo.kind %zu\n", offsetof(InterfaceInfo, kind));
    std::printf("offset InterfaceInfo.major %zu\n", offsetof(InterfaceInfo, major));
    std::printf("offset InterfaceInfo.minor %zu\n", offsetof(InterfaceInfo, minor));

    // Public wrapper classes: two words, vptr then mImpl; methods non-virtual.
    std::printf("size IRuntime %zu\n", sizeof(nvinfer1::IRuntime));
    std::printf("size ICudaEngine %zu\n", sizeof(nvinfer1::ICudaEngine));
    std::printf("size IExecutionContext %zu\n", sizeof(nvinfer1::IExecutionContext));
    std::printf("offset IRuntime.mImpl %ld\n", ProbeRuntime::implOffset());
    std::printf("offset ICudaEngine.mImpl %ld\n", ProbeEngine::implOffset());
    std::printf("offset IExecutionContext.mImpl %ld\n", ProbeContext::implOffset());
    TETHER_SLOT(nvinfer1, IRuntime, getNbDLACores);
    TETHER_SLOT(nvinfer1, ICudaEngine, getNbIOTensors);
    TETHER_SLOT(nvinfer1, IExecutionContext, enqueueV3);
    findDestructors<ProbeRuntime>("IRuntime", 2);
    findDestructors<ProbeEngine>("ICudaEngine", 2);
    findDestructors<ProbeContext>("IExecutionContext", 2);
    findDestructors<ProbeRoot>("VRoot", 2);

    // apiv::VRuntime
    TETHER_SLOT(nvinfer1::apiv, VRuntime, getPImpl);
    TETHER_SLOT_SIG(nvinfer1::apiv, VRuntime, deserializeCudaEngine,
        nvinfer1::ICudaEngine*(void const*, std::size_t) noexcept);
    TETHER_SLOT(nvinfer1::apiv, VRuntime, setErrorRecorder);
    TETHER_SLOT(nvinfer1::apiv, VRuntime, setEngineHostCodeAllowed);
    TETHER_SLOT(nvinfer1::apiv, VRuntime, getEngineHostCodeAllowed);

    // apiv::VCudaEngine
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getPImpl);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, createExecutionContext);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getName);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getNbOptimizationProfiles);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getTensorShape);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getTensorDataType);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getTensorLocation);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, isShapeInferenceIO);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getTensorIOMode);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getNbIOTensors);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getIOTensorName);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getHardwareCompatibilityLevel);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getStreamableWeightsSize);
    TETHER_SLOT(nvinfer1::apiv, VCudaEngine, getDeviceMemorySizeV2);

    // apiv::VExecutionContext
    TETHER_SLOT(nvinfer1::apiv, VExecutionContext, getPImpl);
    TETHER_SLOT(nvinfer1::apiv, VExecutionContext, allInputDimensionsSpecified);
    TETHER_SLOT(nvinfer1::apiv, VExecutionContext, setInputShape);
    TETHER_SLOT(nvinfer1::apiv, VExecutionContext, getTensorShape);
    TETHER_SLOT(nvinfer1::apiv, VExecutionContext, setTensorAddress);
    TETHER_SLOT(nvinfer1::apiv, VExecutionContext, enqueueV3);
    TETHER_SLOT(nvinfer1::apiv, VExecutionContext, updateDeviceMemorySizeForShapes);
    TETHER_SLOT(nvinfer1::apiv, VExecutionContext, setDeviceMemoryV2);

    // ILogger (implemented by tether)
    // Its vtable holds the methods present plus the two destructors; only
    // that many entries are called.
    int loggerEntries = 2;
    loggerEntries += TETHER_SLOT(nvinfer1, ILogger, getAPILanguage);
    loggerEntries += TETHER_SLOT(nvinfer1, ILogger, getInterfaceInfo);
    loggerEntries += TETHER_SLOT(nvinfer1, ILogger, log);
    findDestructors<ProbeLogger>("ILogger", loggerEntries);

    // IErrorRecorder (implemented by tether)
    int recorderEntries = 2;
    recorderEntries += TETHER_SLOT(nvinfer1, IErrorRecorder, getAPILanguage);
    recorderEntries += TETHER_SLOT(nvinfer1, IErrorRecorder, getInterfaceInfo);
    recorderEntries += TETHER_SLOT(nvinfer1, IErrorRecorder, getNbErrors);
    recorderEntries += TETHER_SLOT(nvinfer1, IErrorRecorder, getErrorCode);
    recorderEntries += TETHER_SLOT(nvinfer1, IErrorRecorder, getErrorDesc);
    recorderEntries += TETHER_SLOT(nvinfer1, IErrorRecorder, hasOverflowed);
    recorderEntries += TETHER_SLOT(nvinfer1, IErrorRecorder, clear);
    recorderEntries += TETHER_SLOT(nvinfer1, IErrorRecorder, reportError);
    recorderEntries += TETHER_SLOT(nvinfer1, IErrorRecorder, incRefCount);
    recorderEntries += TETHER_SLOT(nvinfer1, IErrorRecorder, decRefCount);
    findDestructors<ProbeErrorRecorder>("IErrorRecorder", recorderEntries);

    // Enumerations crossing the boundary.
    TETHER_ENUM(DataType, kFLOAT);
    TETHER_ENUM(DataType, kHALF);
    TETHER_ENUM(DataType, kINT8);
    TETHER_ENUM(DataType, kINT32);
    TETHER_ENUM(DataType, kBOOL);
    TETHER_ENUM(DataType, kUINT8);
    TETHER_ENUM(DataType, kFP8);
    TETHER_ENUM(DataType, kBF16);
    TETHER_ENUM(DataType, kINT64);
    TETHER_ENUM(DataType, kINT4);
    TETHER_ENUM(DataType, kFP4);
    TETHER_ENUM(DataType, kE8M0);
    TETHER_ENUM(TensorIOMode, kNONE);
    TETHER_ENUM(TensorIOMode, kINPUT);
    TETHER_ENUM(TensorIOMode, kOUTPUT);
    TETHER_ENUM(TensorLocation, kDEVICE);
    TETHER_ENUM(TensorLocation, kHOST);
    TETHER_ENUM(ExecutionContextAllocationStrategy, kSTATIC);
    TETHER_ENUM(ExecutionContextAllocationStrategy, kON_PROFILE_CHANGE);
    TETHER_ENUM(ExecutionContextAllocationStrategy, kUSER_MANAGED);
    TETHER_ENUM(HardwareCompatibilityLevel, kNONE);
    TETHER_ENUM(HardwareCompatibilityLevel, kAMPERE_PLUS);
    TETHER_ENUM(HardwareCompatibilityLevel, kSAME_COMPUTE_CAPABILITY);
    TETHER_ENUM(ILogger::Severity, kINTERNAL_ERROR);
    TETHER_ENUM(ILogger::Severity, kERROR);
    TETHER_ENUM(ILogger::Severity, kWARNING);
    TETHER_ENUM(ILogger::Severity, kINFO);
    TETHER_ENUM(ILogger::Severity, kVERBOSE);
    TETHER_ENUM(ErrorCode, kSUCCESS);
    TETHER_ENUM(ErrorCode, kUNSPECIFIED_ERROR);
    TETHER_ENUM(ErrorCode, kINTERNAL_ERROR);
    TETHER_ENUM(ErrorCode, kINVALID_ARGUMENT);
    TETHER_ENUM(ErrorCode, kINVALID_CONFIG);
    TETHER_ENUM(ErrorCode, kFAILED_ALLOCATION);
    TETHER_ENUM(ErrorCode, kFAILED_INITIALIZATION);
    TETHER_ENUM(ErrorCode, kFAILED_EXECUTION);
    TETHER_ENUM(ErrorCode, kFAILED_COMPUTATION);
    TETHER_ENUM(ErrorCode, kINVALID_STATE);
    TETHER_ENUM(ErrorCode, kUNSUPPORTED_STATE);
    return 0;
}
