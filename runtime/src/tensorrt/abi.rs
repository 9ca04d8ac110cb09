//! The TensorRT interface-table layout tether relies on: vtable slot numbers,
//! value layouts and enumerator values, one table per major version.
//!
//! TensorRT has no C API. Its public classes (`IRuntime`, `ICudaEngine`,
//! `IExecutionContext`) are two words, `[vptr][mImpl]`, whose methods are
//! inline forwarders to `mImpl`, a pure-virtual `nvinfer1::apiv::V<Name>`.
//! tether calls those `apiv` tables directly (see `ffi.rs`). Every number here
//! was written by hand from the official headers and is **proved** by the
//! test `runtime/tests/trt_abi.rs`, which compiles `runtime/trt-probe/probe.cpp`
//! with g++ against each header set and compares every value below with what
//! the compiler reports (Itanium C++ ABI: a pointer to a virtual member
//! function stores `1 + byte offset` of its vtable entry).
//!
//! Sources: NVIDIA TensorRT headers `NvInferImpl.h` (the `apiv` classes),
//! `NvInferRuntime.h` (`ILogger` in 11.x, public classes),
//! `NvInferRuntimeBase.h` (`IErrorRecorder`, `Dims64`, enums), Apache-2.0,
//! versions 10.0.1–10.16.0 and 11.0.0–11.4.0.
//!
//! Rules the tables follow (checked by the test for every header set it has):
//! - within one major version a table only grows at the end, so a method
//!   keeps its slot; a method added in a minor release is gated on that minor
//!   ([`Slot::since_minor`]);
//! - between 10.x and 11.x methods were removed, so the numbers differ and
//!   the table is chosen from the loaded library's major version
//!   ([`table_for_major`]).

/// One vtable entry of an `apiv` class: its index (in pointer-sized words
/// from the vtable's address point) and the first minor release of the major
/// version that has it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Index into the vtable (0 and 1 are `VRoot`'s destructors).
    pub index: usize,
    /// First minor version (of this table's major) whose headers declare it.
    pub since_minor: u32,
}

const fn slot(index: usize) -> Slot {
    Slot {
        index,
        since_minor: 0,
    }
}

const fn slot_since(index: usize, since_minor: u32) -> Slot {
    Slot { index, since_minor }
}

/// Slots of `nvinfer1::apiv::VRuntime` used by tether.
#[derive(Debug, Clone, Copy)]
pub struct RuntimeSlots {
    /// `IRuntime* getPImpl()`: returns the public object (self-check).
    pub get_pimpl: Slot,
    /// `ICudaEngine* deserializeCudaEngine(void const* blob, size_t size)`.
    pub deserialize_cuda_engine: Slot,
    /// `void setErrorRecorder(IErrorRecorder*)`.
    pub set_error_recorder: Slot,
    /// `void setEngineHostCodeAllowed(bool)`.
    pub set_engine_host_code_allowed: Slot,
    /// `bool getEngineHostCodeAllowed() const`.
    pub get_engine_host_code_allowed: Slot,
}

/// Slots of `nvinfer1::apiv::VCudaEngine` used by tether.
#[derive(Debug, Clone, Copy)]
pub struct EngineSlots {
    /// `ICudaEngine* getPImpl()`.
    pub get_pimpl: Slot,
    /// `IExecutionContext* createExecutionContext(ExecutionContextAllocationStrategy)`.
    pub create_execution_context: Slot,
    /// `char const* getName() const`.
    pub get_name: Slot,
    /// `int32_t getNbOptimizationProfiles() const`.
    pub get_nb_optimization_profiles: Slot,
    /// `Dims getTensorShape(char const*) const` (72-byte return, hidden pointer).
    pub get_tensor_shape: Slot,
    /// `DataType getTensorDataType(char const*) const`.
    pub get_tensor_data_type: Slot,
    /// `TensorLocation getTensorLocation(char const*) const`.
    pub get_tensor_location: Slot,
    /// `bool isShapeInferenceIO(char const*) const`.
    pub is_shape_inference_io: Slot,
    /// `TensorIOMode getTensorIOMode(char const*) const`.
    pub get_tensor_io_mode: Slot,
    /// `int32_t getNbIOTensors() const`.
    pub get_nb_io_tensors: Slot,
    /// `char const* getIOTensorName(int32_t) const`.
    pub get_io_tensor_name: Slot,
    /// `HardwareCompatibilityLevel getHardwareCompatibilityLevel() const`.
    pub get_hardware_compatibility_level: Slot,
    /// `int64_t getStreamableWeightsSize() const`.
    pub get_streamable_weights_size: Slot,
    /// `int64_t getDeviceMemorySizeV2() const`.
    pub get_device_memory_size_v2: Slot,
}

/// Slots of `nvinfer1::apiv::VExecutionContext` used by tether.
#[derive(Debug, Clone, Copy)]
pub struct ContextSlots {
    /// `IExecutionContext* getPImpl()`.
    pub get_pimpl: Slot,
    /// `bool allInputDimensionsSpecified() const`.
    pub all_input_dimensions_specified: Slot,
    /// `bool setInputShape(char const*, Dims const&)`.
    pub set_input_shape: Slot,
    /// `Dims getTensorShape(char const*) const`.
    pub get_tensor_shape: Slot,
    /// `bool setTensorAddress(char const*, void*)`.
    pub set_tensor_address: Slot,
    /// `bool enqueueV3(cudaStream_t)`.
    pub enqueue_v3: Slot,
    /// `size_t updateDeviceMemorySizeForShapes()`.
    pub update_device_memory_size_for_shapes: Slot,
    /// `void setDeviceMemoryV2(void*, int64_t)`.
    pub set_device_memory_v2: Slot,
}

/// Vtable layout of `nvinfer1::ILogger`, implemented by tether.
#[derive(Debug, Clone, Copy)]
pub struct LoggerLayout {
    /// `APILanguage getAPILanguage() const` (11.x: from `IVersionedInterface`).
    pub get_api_language: Option<usize>,
    /// `InterfaceInfo getInterfaceInfo() const` (11.x).
    pub get_interface_info: Option<usize>,
    /// Complete-object destructor.
    pub destructor: usize,
    /// Deleting destructor.
    pub deleting_destructor: usize,
    /// `void log(Severity, char const*)`.
    pub log: usize,
    /// Number of entries.
    pub len: usize,
}

/// Vtable layout of `nvinfer1::IErrorRecorder` (derives from
/// `IVersionedInterface` in 10.x and 11.x alike), implemented by tether.
#[derive(Debug, Clone, Copy)]
pub struct ErrorRecorderLayout {
    /// `APILanguage getAPILanguage() const`.
    pub get_api_language: usize,
    /// `InterfaceInfo getInterfaceInfo() const`.
    pub get_interface_info: usize,
    /// Complete-object destructor.
    pub destructor: usize,
    /// Deleting destructor.
    pub deleting_destructor: usize,
    /// `int32_t getNbErrors() const`.
    pub get_nb_errors: usize,
    /// `ErrorCode getErrorCode(int32_t) const`.
    pub get_error_code: usize,
    /// `char const* getErrorDesc(int32_t) const`.
    pub get_error_desc: usize,
    /// `bool hasOverflowed() const`.
    pub has_overflowed: usize,
    /// `void clear()`.
    pub clear: usize,
    /// `bool reportError(ErrorCode, char const*)`.
    pub report_error: usize,
    /// `int32_t incRefCount()`.
    pub inc_ref_count: usize,
    /// `int32_t decRefCount()`.
    pub dec_ref_count: usize,
    /// Number of entries.
    pub len: usize,
}

/// Everything tether needs to know about one TensorRT major version's ABI.
#[derive(Debug, Clone, Copy)]
pub struct AbiTable {
    /// The TensorRT major version this table describes.
    pub major: u32,
    /// Oldest minor release tether runs with (every slot it calls exists).
    pub min_minor: u32,
    /// `apiv::VRuntime`.
    pub runtime: RuntimeSlots,
    /// `apiv::VCudaEngine`.
    pub engine: EngineSlots,
    /// `apiv::VExecutionContext`.
    pub context: ContextSlots,
    /// `ILogger`.
    pub logger: LoggerLayout,
    /// `IErrorRecorder`.
    pub error_recorder: ErrorRecorderLayout,
}

/// Index of the deleting destructor in a public object's own vtable
/// (`IRuntime`, `ICudaEngine`, `IExecutionContext`): `[0]` complete, `[1]`
/// deleting. Calling `[1]` is what `delete obj` does.
pub const PUBLIC_DELETING_DESTRUCTOR: usize = 1;
/// Byte offset of `mImpl` in a public object (after the vtable pointer).
pub const PUBLIC_IMPL_OFFSET: usize = 8;
/// Size in bytes of a public object: `[vptr][mImpl]`.
pub const PUBLIC_OBJECT_SIZE: usize = 16;
/// `apiv::VRoot` destructor slots: complete, deleting.
pub const VROOT_DESTRUCTORS: (usize, usize) = (0, 1);

/// `IErrorRecorder::kMAX_DESC_LENGTH`: longest description TensorRT passes (bytes,
/// without the terminating NUL).
pub const ERROR_DESC_MAX_LEN: usize = 127;

const ERROR_RECORDER: ErrorRecorderLayout = ErrorRecorderLayout {
    get_api_language: 0,
    get_interface_info: 1,
    destructor: 2,
    deleting_destructor: 3,
    get_nb_errors: 4,
    get_error_code: 5,
    get_error_desc: 6,
    has_overflowed: 7,
    clear: 8,
    report_error: 9,
    inc_ref_count: 10,
    dec_ref_count: 11,
    len: 12,
};

/// TensorRT 10.x (10.1 and later: `getDeviceMemorySizeV2` and
/// `setDeviceMemoryV2` arrived in 10.1). JetPack 6.1/6.2 ship 10.3, DRIVE OS
/// 7.0.3 ships 10.10.
pub static TRT10: AbiTable = AbiTable {
    major: 10,
    min_minor: 1,
    runtime: RuntimeSlots {
        get_pimpl: slot(2),
        deserialize_cuda_engine: slot(3),
        set_error_recorder: slot(9),
        set_engine_host_code_allowed: slot(21),
        get_engine_host_code_allowed: slot(22),
    },
    engine: EngineSlots {
        get_pimpl: slot(2),
        create_execution_context: slot(5),
        get_name: slot(9),
        get_nb_optimization_profiles: slot(10),
        get_tensor_shape: slot(19),
        get_tensor_data_type: slot(20),
        get_tensor_location: slot(21),
        is_shape_inference_io: slot(22),
        get_tensor_io_mode: slot(23),
        get_nb_io_tensors: slot(30),
        get_io_tensor_name: slot(31),
        get_hardware_compatibility_level: slot(32),
        get_streamable_weights_size: slot(46),
        get_device_memory_size_v2: slot_since(52, 1),
    },
    context: ContextSlots {
        get_pimpl: slot(2),
        all_input_dimensions_specified: slot(12),
        set_input_shape: slot(21),
        get_tensor_shape: slot(22),
        set_tensor_address: slot(24),
        enqueue_v3: slot(37),
        update_device_memory_size_for_shapes: slot(48),
        set_device_memory_v2: slot_since(49, 1),
    },
    logger: LoggerLayout {
        get_api_language: None,
        get_interface_info: None,
        log: 0,
        destructor: 1,
        deleting_destructor: 2,
        len: 3,
    },
    error_recorder: ERROR_RECORDER,
};

/// TensorRT 11.x (data-center GPUs; 11.4 does not support Jetson).
pub static TRT11: AbiTable = AbiTable {
    major: 11,
    min_minor: 0,
    runtime: RuntimeSlots {
        get_pimpl: slot(2),
        deserialize_cuda_engine: slot(3),
        set_error_recorder: slot(8),
        set_engine_host_code_allowed: slot(20),
        get_engine_host_code_allowed: slot(21),
    },
    engine: EngineSlots {
        get_pimpl: slot(2),
        create_execution_context: slot(5),
        get_name: slot(7),
        get_nb_optimization_profiles: slot(8),
        get_tensor_shape: slot(15),
        get_tensor_data_type: slot(16),
        get_tensor_location: slot(17),
        is_shape_inference_io: slot(18),
        get_tensor_io_mode: slot(19),
        get_nb_io_tensors: slot(26),
        get_io_tensor_name: slot(27),
        get_hardware_compatibility_level: slot(28),
        get_streamable_weights_size: slot(38),
        get_device_memory_size_v2: slot(44),
    },
    context: ContextSlots {
        get_pimpl: slot(2),
        all_input_dimensions_specified: slot(12),
        set_input_shape: slot(20),
        get_tensor_shape: slot(21),
        set_tensor_address: slot(23),
        enqueue_v3: slot(36),
        update_device_memory_size_for_shapes: slot(47),
        set_device_memory_v2: slot(48),
    },
    logger: LoggerLayout {
        get_api_language: Some(0),
        get_interface_info: Some(1),
        destructor: 2,
        deleting_destructor: 3,
        log: 4,
        len: 5,
    },
    error_recorder: ERROR_RECORDER,
};

/// The table for a TensorRT major version, or `None` when tether has none
/// (anything but 10 and 11).
pub fn table_for_major(major: u32) -> Option<&'static AbiTable> {
    match major {
        10 => Some(&TRT10),
        11 => Some(&TRT11),
        _ => None,
    }
}

/// One named `apiv` method slot, as the ABI test compares it with the probe
/// (`<Class>.<method>`, the header's own names).
#[derive(Debug, Clone, Copy)]
pub struct NamedSlot {
    /// `apiv` class name, e.g. `VRuntime`.
    pub class: &'static str,
    /// Method name as declared in the header.
    pub method: &'static str,
    /// The slot tether uses.
    pub slot: Slot,
}

const fn named(class: &'static str, method: &'static str, slot: Slot) -> NamedSlot {
    NamedSlot {
        class,
        method,
        slot,
    }
}

impl AbiTable {
    /// Every `apiv` slot tether calls, named as in the headers.
    pub fn named_slots(&self) -> [NamedSlot; 27] {
        let r = &self.runtime;
        let e = &self.engine;
        let c = &self.context;
        [
            named("VRuntime", "getPImpl", r.get_pimpl),
            named(
                "VRuntime",
                "deserializeCudaEngine",
                r.deserialize_cuda_engine,
            ),
            named("VRuntime", "setErrorRecorder", r.set_error_recorder),
            named(
                "VRuntime",
                "setEngineHostCodeAllowed",
                r.set_engine_host_code_allowed,
            ),
            named(
                "VRuntime",
                "getEngineHostCodeAllowed",
                r.get_engine_host_code_allowed,
            ),
            named("VCudaEngine", "getPImpl", e.get_pimpl),
            named(
                "VCudaEngine",
                "createExecutionContext",
                e.create_execution_context,
            ),
            named("VCudaEngine", "getName", e.get_name),
            named(
                "VCudaEngine",
                "getNbOptimizationProfiles",
                e.get_nb_optimization_profiles,
            ),
            named("VCudaEngine", "getTensorShape", e.get_tensor_shape),
            named("VCudaEngine", "getTensorDataType", e.get_tensor_data_type),
            named("VCudaEngine", "getTensorLocation", e.get_tensor_location),
            named("VCudaEngine", "isShapeInferenceIO", e.is_shape_inference_io),
            named("VCudaEngine", "getTensorIOMode", e.get_tensor_io_mode),
            named("VCudaEngine", "getNbIOTensors", e.get_nb_io_tensors),
            named("VCudaEngine", "getIOTensorName", e.get_io_tensor_name),
            named(
                "VCudaEngine",
                "getHardwareCompatibilityLevel",
                e.get_hardware_compatibility_level,
            ),
            named(
                "VCudaEngine",
                "getStreamableWeightsSize",
                e.get_streamable_weights_size,
            ),
            named(
                "VCudaEngine",
                "getDeviceMemorySizeV2",
                e.get_device_memory_size_v2,
            ),
            named("VExecutionContext", "getPImpl", c.get_pimpl),
            named(
                "VExecutionContext",
                "allInputDimensionsSpecified",
                c.all_input_dimensions_specified,
            ),
            named("VExecutionContext", "setInputShape", c.set_input_shape),
            named("VExecutionContext", "getTensorShape", c.get_tensor_shape),
            named(
                "VExecutionContext",
                "setTensorAddress",
                c.set_tensor_address,
            ),
            named("VExecutionContext", "enqueueV3", c.enqueue_v3),
            named(
                "VExecutionContext",
                "updateDeviceMemorySizeForShapes",
                c.update_device_memory_size_for_shapes,
            ),
            named(
                "VExecutionContext",
                "setDeviceMemoryV2",
                c.set_device_memory_v2,
            ),
        ]
    }

    /// The `IErrorRecorder` methods tether implements, named as in the
    /// headers, with their slots.
    pub fn error_recorder_slots(&self) -> [(&'static str, usize); 10] {
        let r = &self.error_recorder;
        [
            ("getAPILanguage", r.get_api_language),
            ("getInterfaceInfo", r.get_interface_info),
            ("getNbErrors", r.get_nb_errors),
            ("getErrorCode", r.get_error_code),
            ("getErrorDesc", r.get_error_desc),
            ("hasOverflowed", r.has_overflowed),
            ("clear", r.clear),
            ("reportError", r.report_error),
            ("incRefCount", r.inc_ref_count),
            ("decRefCount", r.dec_ref_count),
        ]
    }
}

/// `nvinfer1::Dims64`: up to 8 extents. 72 bytes (`int32_t nbDims`, 4 bytes
/// of padding, `int64_t d[8]`). Returned by value through a hidden result
/// pointer, passed by `const&` as a pointer.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dims64 {
    /// Number of extents in use (-1 when TensorRT reports an invalid shape).
    pub nb_dims: i32,
    /// Extents; `-1` marks a dynamic (not yet known) extent.
    pub d: [i64; DIMS_MAX],
}

/// `Dims64::MAX_DIMS`.
pub const DIMS_MAX: usize = 8;

/// `nvinfer1::InterfaceInfo` returned by `getInterfaceInfo()` (16 bytes,
/// returned in two registers on x86_64 and aarch64).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct InterfaceInfo {
    /// Interface kind, a static NUL-terminated string (`"ILogger"`).
    pub kind: *const core::ffi::c_char,
    /// Interface major version.
    pub major: i32,
    /// Interface minor version.
    pub minor: i32,
}

/// `ExecutionContextAllocationStrategy::kUSER_MANAGED`.
pub const ALLOCATION_USER_MANAGED: i32 = 2;
/// `APILanguage::kCPP`, what tether's interfaces report.
pub const API_LANGUAGE_CPP: i32 = 0;

/// One enumerator value crossing the boundary, named `<Enum>.<enumerator>` as
/// the probe prints it, with the first version whose headers declare it.
#[derive(Debug, Clone, Copy)]
pub struct EnumValue {
    /// `<Enum>.<enumerator>`, e.g. `DataType.kHALF`.
    pub name: &'static str,
    /// Its integer value.
    pub value: i32,
    /// First TensorRT version `(major, minor)` declaring it.
    pub since: (u32, u32),
}

const fn ev(name: &'static str, value: i32) -> EnumValue {
    EnumValue {
        name,
        value,
        since: (10, 0),
    }
}

const fn ev_since(name: &'static str, value: i32, since: (u32, u32)) -> EnumValue {
    EnumValue { name, value, since }
}

/// Every enumerator value tether relies on (checked by the ABI test).
pub static ENUM_VALUES: &[EnumValue] = &[
    ev("DataType.kFLOAT", DataType::Float as i32),
    ev("DataType.kHALF", DataType::Half as i32),
    ev("DataType.kINT8", DataType::Int8 as i32),
    ev("DataType.kINT32", DataType::Int32 as i32),
    ev("DataType.kBOOL", DataType::Bool as i32),
    ev("DataType.kUINT8", DataType::Uint8 as i32),
    ev("DataType.kFP8", DataType::Fp8 as i32),
    ev("DataType.kBF16", DataType::Bf16 as i32),
    ev("DataType.kINT64", DataType::Int64 as i32),
    ev("DataType.kINT4", DataType::Int4 as i32),
    ev_since("DataType.kFP4", DataType::Fp4 as i32, (10, 8)),
    ev_since("DataType.kE8M0", DataType::E8m0 as i32, (10, 12)),
    ev("TensorIOMode.kNONE", 0),
    ev("TensorIOMode.kINPUT", TensorIoMode::Input as i32),
    ev("TensorIOMode.kOUTPUT", TensorIoMode::Output as i32),
    ev("TensorLocation.kDEVICE", TensorLocation::Device as i32),
    ev("TensorLocation.kHOST", TensorLocation::Host as i32),
    ev(
        "ExecutionContextAllocationStrategy.kUSER_MANAGED",
        ALLOCATION_USER_MANAGED,
    ),
    ev(
        "HardwareCompatibilityLevel.kNONE",
        HardwareCompatibility::None as i32,
    ),
    ev(
        "HardwareCompatibilityLevel.kAMPERE_PLUS",
        HardwareCompatibility::AmperePlus as i32,
    ),
    ev_since(
        "HardwareCompatibilityLevel.kSAME_COMPUTE_CAPABILITY",
        HardwareCompatibility::SameComputeCapability as i32,
        (10, 9),
    ),
    ev("ILogger::Severity.kINTERNAL_ERROR", 0),
    ev("ILogger::Severity.kERROR", 1),
    ev("ILogger::Severity.kWARNING", 2),
    ev("ILogger::Severity.kINFO", 3),
    ev("ILogger::Severity.kVERBOSE", 4),
    ev("ErrorCode.kSUCCESS", 0),
    ev("ErrorCode.kUNSPECIFIED_ERROR", 1),
    ev("ErrorCode.kINTERNAL_ERROR", 2),
    ev("ErrorCode.kINVALID_ARGUMENT", 3),
    ev("ErrorCode.kINVALID_CONFIG", 4),
    ev("ErrorCode.kFAILED_ALLOCATION", 5),
    ev("ErrorCode.kFAILED_INITIALIZATION", 6),
    ev("ErrorCode.kFAILED_EXECUTION", 7),
    ev("ErrorCode.kFAILED_COMPUTATION", 8),
    ev("ErrorCode.kINVALID_STATE", 9),
    ev("ErrorCode.kUNSUPPORTED_STATE", 10),
];

/// Element type of an I/O tensor (`nvinfer1::DataType`).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    /// 32-bit float.
    Float = 0,
    /// IEEE 16-bit float.
    Half = 1,
    /// Signed 8-bit integer (quantized).
    Int8 = 2,
    /// Signed 32-bit integer.
    Int32 = 3,
    /// 8-bit boolean.
    Bool = 4,
    /// Unsigned 8-bit integer.
    Uint8 = 5,
    /// 8-bit float (E4M3).
    Fp8 = 6,
    /// bfloat16.
    Bf16 = 7,
    /// Signed 64-bit integer.
    Int64 = 8,
    /// Signed 4-bit integer (packed).
    Int4 = 9,
    /// 4-bit float (E2M1, packed), 10.8+.
    Fp4 = 10,
    /// 8-bit exponent-only scale (E8M0), 10.12+.
    E8m0 = 11,
}

impl DataType {
    /// Decodes TensorRT's integer, `None` for a value tether does not know.
    pub fn from_raw(raw: i32) -> Option<Self> {
        Some(match raw {
            0 => Self::Float,
            1 => Self::Half,
            2 => Self::Int8,
            3 => Self::Int32,
            4 => Self::Bool,
            5 => Self::Uint8,
            6 => Self::Fp8,
            7 => Self::Bf16,
            8 => Self::Int64,
            9 => Self::Int4,
            10 => Self::Fp4,
            11 => Self::E8m0,
            _ => return None,
        })
    }

    /// Size of one element in bits (4 for the packed 4-bit types).
    pub fn bits(self) -> u32 {
        match self {
            Self::Float | Self::Int32 => 32,
            Self::Half | Self::Bf16 => 16,
            Self::Int8 | Self::Bool | Self::Uint8 | Self::Fp8 | Self::E8m0 => 8,
            Self::Int64 => 64,
            Self::Int4 | Self::Fp4 => 4,
        }
    }
}

/// Whether an I/O tensor is an input or an output (`nvinfer1::TensorIOMode`).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorIoMode {
    /// Input tensor.
    Input = 1,
    /// Output tensor.
    Output = 2,
}

/// Where an I/O tensor lives (`nvinfer1::TensorLocation`).
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TensorLocation {
    /// Device memory.
    Device = 0,
    /// Host memory (shape tensors).
    Host = 1,
}

/// `nvinfer1::HardwareCompatibilityLevel`: the platform vocabulary's
/// [`tether_targets::HardwareCompat`] (same discriminants, checked against the
/// headers by `value_layouts_match_the_headers` and `runtime/tests/trt_abi.rs`).
pub use tether_targets::HardwareCompat as HardwareCompatibility;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_layouts_match_the_headers() {
        assert_eq!(core::mem::size_of::<Dims64>(), 72);
        assert_eq!(core::mem::offset_of!(Dims64, d), 8);
        assert_eq!(core::mem::size_of::<InterfaceInfo>(), 16);
    }

    #[test]
    fn tables_only_grow_within_a_major() {
        for t in [&TRT10, &TRT11] {
            for s in t.named_slots() {
                assert!(s.slot.index >= 2, "{}.{} overlaps VRoot", s.class, s.method);
            }
            assert_eq!(t.logger.len, if t.major == 10 { 3 } else { 5 });
        }
        assert!(table_for_major(9).is_none());
        assert!(table_for_major(12).is_none());
    }
}
