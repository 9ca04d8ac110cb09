// tether C++ wrapper: header-only, C++17, over the C API in tether.h (libtether).
//
// - RAII, move-only handles: Detector, Ocr, VoiceActivity, Embedder each own one tether_model and
//   close it in their destructor; Generator owns a tether_generator, Network a tether_network. Copying is deleted (a handle is one pipeline's state).
// - Inputs are views: ImageView over caller pixels, pointer + size for samples and results,
//   std::string_view for texts. Nothing is copied into the wrapper; the hot-path calls
//   (detect, detect_staged, push) allocate nothing in the wrapper or the C layer.
// - Errors are exceptions (tether::Error, carrying the tether_status and the library's
//   message). Why exceptions and not an expected-style result: opening is a constructor
//   (RAII needs it to fail by throwing), C++17 has no std::expected, and on the hot path a
//   failure is exceptional (a device error, a bad frame) while success costs one compare of
//   the status, the same as checking a result object. The message string is only built when
//   a call fails. Code that must not throw can call the C functions through handle().
//
// Thread safety: as the C API. An object may be moved to and used from any thread, by one
// thread at a time; distinct objects are independent.
#ifndef TETHER_TETHER_HPP
#define TETHER_TETHER_HPP

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "tether.h"

namespace tether {

/// A failed call: the C status and the library's message (tether_last_error at the time).
class Error : public std::runtime_error {
public:
    Error(tether_status status, const std::string &message)
        : std::runtime_error(message), status_(status) {}
    /// The C status (TETHER_ERR_*).
    tether_status status() const noexcept { return status_; }
    /// The status's name, e.g. "TETHER_ERR_CAPACITY".
    const char *status_name() const noexcept { return tether_status_name(status_); }

private:
    tether_status status_;
};

namespace detail {
/// Throw tether::Error for a status other than TETHER_OK.
inline void check(tether_status s) {
    if (s != TETHER_OK) throw Error(s, tether_last_error());
}

/// The owner of one tether_model: closes it, moves, never copies.
class Handle {
public:
    Handle() noexcept = default;
    explicit Handle(tether_model *m) noexcept : m_(m) {}
    Handle(Handle &&o) noexcept : m_(std::exchange(o.m_, nullptr)) {}
    Handle &operator=(Handle &&o) noexcept {
        if (this != &o) {
            tether_model_close(m_);
            m_ = std::exchange(o.m_, nullptr);
        }
        return *this;
    }
    Handle(const Handle &) = delete;
    Handle &operator=(const Handle &) = delete;
    ~Handle() { tether_model_close(m_); }
    tether_model *get() const noexcept { return m_; }

private:
    tether_model *m_ = nullptr;
};
} // namespace detail

/// Open options (tether_options with its defaults).
class Options {
public:
    Options() { detail::check(tether_options_init(&o_)); }
    Options &device(tether_device d, uint32_t index = 0) {
        o_.device = d;
        o_.device_index = index;
        return *this;
    }
    Options &precision(tether_precision p) {
        o_.precision = p;
        return *this;
    }
    Options &threads(uint32_t n) {
        o_.threads = n;
        return *this;
    }
    Options &sync(tether_sync s) {
        o_.sync = s;
        return *this;
    }
    Options &staging(tether_staging s) {
        o_.staging = s;
        return *this;
    }
    Options &verify_eagerly(bool v) {
        o_.verify_eagerly = v ? 1 : 0;
        return *this;
    }
    Options &graphs(bool v) {
        o_.graphs = v ? 1 : 0;
        return *this;
    }
    const tether_options *get() const noexcept { return &o_; }

private:
    tether_options o_{};
};

namespace detail {
inline const char *family_name(uint32_t f) noexcept {
    switch (f) {
    case TETHER_FAMILY_DETECT: return "detect";
    case TETHER_FAMILY_VAD: return "vad";
    case TETHER_FAMILY_EMBED: return "embed";
    case TETHER_FAMILY_OCR: return "ocr";
    default: return "unknown";
    }
}

/// Open a bundle file and check its family.
inline Handle open(const std::string &path, const Options &options, tether_family want) {
    tether_model *m = nullptr;
    check(tether_model_open(path.c_str(), options.get(), &m));
    Handle h(m);
    uint32_t family = 0;
    check(tether_model_family(m, &family));
    if (family != static_cast<uint32_t>(want)) {
        throw Error(TETHER_ERR_WRONG_FAMILY, "bundle `" + path + "` is a `" + family_name(family) +
                                                 "` bundle, not a `" + family_name(want) + "` bundle");
    }
    return h;
}

/// Open a bundle from memory (the bytes are copied during the call) and check its family.
inline Handle open_memory(const void *data, std::size_t size, const Options &options,
                          tether_family want) {
    tether_model *m = nullptr;
    check(tether_model_open_memory(static_cast<const uint8_t *>(data), size, options.get(), &m));
    Handle h(m);
    uint32_t family = 0;
    check(tether_model_family(m, &family));
    if (family != static_cast<uint32_t>(want)) {
        throw Error(TETHER_ERR_WRONG_FAMILY, std::string("the bundle is a `") + family_name(family) +
                                                 "` bundle, not a `" + family_name(want) + "` bundle");
    }
    return h;
}
} // namespace detail

/// A caller-owned 8-bit image (pixels not copied; read during the call only).
struct ImageView {
    const uint8_t *data = nullptr;
    uint32_t width = 0;
    uint32_t height = 0;
    std::size_t pitch = 0; ///< bytes between rows' starts
    tether_pixel_format format = TETHER_PIXEL_RGB8;

    tether_image_view c() const noexcept { return {data, width, height, pitch, format}; }
};

/// The detector's frame staging (owned by the Detector; valid until the next prepare of
/// another geometry or the Detector's destruction).
using StagingBuffer = tether_staging_buffer;
/// One detection (box corners in source pixels, class id, score).
using Detection = tether_detection;

/// A YOLOv8 detector (a `detect` bundle).
class Detector {
public:
    /// Open `path` (TETHER_ERR_WRONG_FAMILY for another family's bundle).
    explicit Detector(const std::string &path, const Options &options = Options())
        : h_(detail::open(path, options, TETHER_FAMILY_DETECT)) {}
    /// Open from the `size` bytes of a bundle at `data` (copied during the call).
    static Detector from_memory(const void *data, std::size_t size, const Options &options = Options()) {
        return Detector(detail::open_memory(data, size, options, TETHER_FAMILY_DETECT));
    }

    /// Detect in `image`; the best min(found, capacity) go to `out`, the count found is
    /// returned. Throws Error(TETHER_ERR_CAPACITY) when `capacity` is smaller than the count
    /// found (the best `capacity` are written all the same).
    std::size_t detect(const ImageView &image, Detection *out, std::size_t capacity) {
        tether_image_view v = image.c();
        std::size_t n = 0;
        detail::check(tether_detect(h_.get(), &v, out, capacity, &n));
        return n;
    }
    /// Prepare for frames of this geometry (off the hot path).
    void prepare(uint32_t width, uint32_t height, std::size_t pitch, tether_pixel_format format) {
        detail::check(tether_detect_prepare(h_.get(), width, height, pitch, format));
    }
    /// The staging buffer to write the next frame into in place (after prepare).
    StagingBuffer staging() {
        StagingBuffer s{};
        detail::check(tether_detect_staging(h_.get(), &s));
        return s;
    }
    /// Detect in the frame in the staging buffer; as detect().
    std::size_t detect_staged(Detection *out, std::size_t capacity) {
        std::size_t n = 0;
        detail::check(tether_detect_staged(h_.get(), out, capacity, &n));
        return n;
    }
    /// The name of class `id` (owned by the Detector).
    std::string_view class_name(uint32_t id) const {
        const char *name = nullptr;
        detail::check(tether_detect_class_name(h_.get(), id, &name));
        return name;
    }
    /// Number of classes.
    std::size_t class_count() const {
        std::size_t n = 0;
        detail::check(tether_detect_class_count(h_.get(), &n));
        return n;
    }
    /// The C handle (owned by this object).
    tether_model *handle() const noexcept { return h_.get(); }

private:
    explicit Detector(detail::Handle h) noexcept : h_(std::move(h)) {}
    detail::Handle h_;
};

/// One recognised text line: its quad (x, y of the top-left, top-right, bottom-right,
/// bottom-left corners, source pixels), scores, the 180-degree turn, and its text as a view
/// into the Ocr's text buffer (valid until the next read() on that reader).
struct TextLine {
    float quad[8];
    float score;     ///< recognition confidence
    float box_score; ///< detection score
    bool rotated;
    std::string_view text;
};

/// PP-OCR text recognition (an `ocr` bundle). Keeps its line and text buffers between
/// reads: after the first images have grown them, a read() allocates nothing in the wrapper.
class Ocr {
public:
    explicit Ocr(const std::string &path, const Options &options = Options())
        : h_(detail::open(path, options, TETHER_FAMILY_OCR)) {}

    /// The lines of `image` in reading order (views valid until the next read()).
    const std::vector<TextLine> &read(const ImageView &image) {
        tether_image_view v = image.c();
        std::size_t n = 0, bytes = 0;
        tether_status s = tether_ocr(h_.get(), &v, raw_.data(), raw_.size(), &n, text_.data(), text_.size(), &bytes);
        if (s == TETHER_ERR_CAPACITY && (n > raw_.size() || bytes > text_.size())) {
            // Grow to the sizes the library reported and read again.
            raw_.resize(std::max(n, raw_.size()));
            text_.resize(std::max(bytes, text_.size()));
            s = tether_ocr(h_.get(), &v, raw_.data(), raw_.size(), &n, text_.data(), text_.size(), &bytes);
        }
        detail::check(s);
        lines_.clear();
        for (std::size_t i = 0; i < n; i++) {
            const tether_ocr_line &r = raw_[i];
            TextLine l{};
            std::copy(r.quad, r.quad + 8, l.quad);
            l.score = r.score;
            l.box_score = r.box_score;
            l.rotated = r.rotated != 0;
            l.text = std::string_view(text_.data() + r.text_offset, r.text_size);
            lines_.push_back(l);
        }
        return lines_;
    }
    /// The lines into caller storage (as tether_ocr: both counts returned through the
    /// pointers; throws Error(TETHER_ERR_CAPACITY) when either array is too small).
    void read(const ImageView &image, tether_ocr_line *lines, std::size_t line_capacity, std::size_t &line_count,
              char *text, std::size_t text_capacity, std::size_t &text_size) {
        tether_image_view v = image.c();
        detail::check(tether_ocr(h_.get(), &v, lines, line_capacity, &line_count, text, text_capacity, &text_size));
    }
    tether_model *handle() const noexcept { return h_.get(); }

private:
    detail::Handle h_;
    // Empty at first: the first read() learns the sizes it needs from the library.
    std::vector<tether_ocr_line> raw_;
    std::vector<char> text_;
    std::vector<TextLine> lines_;
};

/// Silero voice activity (a `vad` bundle): 16 kHz mono samples in, one result per
/// 512-sample chunk.
class VoiceActivity {
public:
    explicit VoiceActivity(const std::string &path, const Options &options = Options())
        : h_(detail::open(path, options, TETHER_FAMILY_VAD)) {}

    /// Push `count` samples at `sample_rate` (16000); chunk results go to `out` (capacity
    /// `capacity`), their number is returned. Throws Error(TETHER_ERR_CAPACITY) when the
    /// samples complete more chunks than `capacity`, Error(TETHER_ERR_INVALID_ARGUMENT) when
    /// a sample is NaN or infinite (then nothing is consumed either).
    std::size_t push(const float *samples, std::size_t count, uint32_t sample_rate,
                     tether_vad_chunk *out, std::size_t capacity) {
        std::size_t n = 0;
        detail::check(tether_vad_push(h_.get(), samples, count, sample_rate, out, capacity, &n));
        return n;
    }
    /// End the stream (pending samples zero-padded and run) and reset it.
    tether_vad_end finish() {
        tether_vad_end e{};
        detail::check(tether_vad_finish(h_.get(), &e));
        return e;
    }
    /// Start a new stream.
    void reset() { detail::check(tether_vad_reset(h_.get())); }
    tether_model *handle() const noexcept { return h_.get(); }

private:
    detail::Handle h_;
};

/// Sentence embeddings (an `embed` bundle).
class Embedder {
public:
    explicit Embedder(const std::string &path, const Options &options = Options())
        : h_(detail::open(path, options, TETHER_FAMILY_EMBED)) {}

    /// Floats per embedding.
    std::size_t dim() const {
        std::size_t d = 0;
        detail::check(tether_embed_dim(h_.get(), &d));
        return d;
    }
    /// Embed `count` texts into `out` (`count * dim()` floats, row-major).
    void embed(const std::string_view *texts, std::size_t count, float *out, std::size_t capacity) {
        std::vector<tether_text> t(count);
        for (std::size_t i = 0; i < count; i++) {
            t[i] = {reinterpret_cast<const uint8_t *>(texts[i].data()), texts[i].size()};
        }
        detail::check(tether_embed(h_.get(), t.data(), count, out, capacity));
    }
    /// Embed `texts`, returning `texts.size() * dim()` floats.
    std::vector<float> embed(const std::vector<std::string_view> &texts) {
        std::vector<float> out(texts.size() * dim());
        embed(texts.data(), texts.size(), out.data(), out.size());
        return out;
    }
    tether_model *handle() const noexcept { return h_.get(); }

private:
    detail::Handle h_;
};

/// One network of a bundle on the caller's named tensors (tether_network): host buffers,
/// shapes as the bundle records them. Move-only.
class Network {
public:
    /// Open network `name` of the bundle at `path` (empty `name`: its only network).
    explicit Network(const std::string &path, const std::string &name = "", const Options &options = Options()) {
        detail::check(tether_network_open(path.c_str(), name.empty() ? nullptr : name.c_str(), options.get(), &n_));
    }
    Network(Network &&o) noexcept : n_(std::exchange(o.n_, nullptr)) {}
    Network &operator=(Network &&o) noexcept {
        if (this != &o) {
            tether_network_close(n_);
            n_ = std::exchange(o.n_, nullptr);
        }
        return *this;
    }
    Network(const Network &) = delete;
    Network &operator=(const Network &) = delete;
    ~Network() { tether_network_close(n_); }

    /// The inputs' or outputs' descriptions (names owned by this Network).
    std::vector<tether_tensor_info> tensors(tether_io io) const {
        std::size_t count = 0;
        detail::check(tether_network_tensor_count(n_, io, &count));
        std::vector<tether_tensor_info> v(count);
        for (std::size_t i = 0; i < count; i++) detail::check(tether_network_tensor(n_, io, i, &v[i]));
        return v;
    }
    /// Copy `count` elements into input `name` (their bytes must equal the input's size).
    /// T must be the input's element type (float: f32, uint16_t: f16 bits, int64_t, int32_t,
    /// int8_t, uint8_t: u8 or bool); another throws Error (TETHER_ERR_INVALID_ARGUMENT)
    /// naming both, as do input() and output().
    template <class T> void set_input(const std::string &name, const T *data, std::size_t count) {
        check_type<T>(TETHER_IO_INPUT, name);
        detail::check(tether_network_set_input(n_, name.c_str(), data, count * sizeof(T)));
    }
    /// Input `name`'s own buffer, to write in place (valid until the Network is destroyed).
    template <class T> T *input(const std::string &name, std::size_t &count) {
        check_type<T>(TETHER_IO_INPUT, name);
        void *p = nullptr;
        std::size_t bytes = 0;
        detail::check(tether_network_input(n_, name.c_str(), &p, &bytes));
        count = bytes / sizeof(T);
        return static_cast<T *>(p);
    }
    /// Run once on the current inputs.
    void run() { detail::check(tether_network_run(n_)); }
    /// Output `name` of the last run, borrowed until the next run() (count in elements).
    template <class T> const T *output(const std::string &name, std::size_t &count) const {
        check_type<T>(TETHER_IO_OUTPUT, name);
        const void *p = nullptr;
        std::size_t bytes = 0;
        detail::check(tether_network_output(n_, name.c_str(), &p, &bytes));
        count = bytes / sizeof(T);
        return static_cast<const T *>(p);
    }
    /// The device memory of input or output `name` on a GPU (tether_network_device_buffer):
    /// `address` is a CUdeviceptr (`reinterpret_cast<void *>(address)` for the CUDA runtime),
    /// `size` its bytes; valid until the Network is destroyed. Throws Error
    /// (TETHER_ERR_UNSUPPORTED) on the CPU.
    struct DeviceBuffer {
        uint64_t address;
        std::size_t size;
    };
    DeviceBuffer device_buffer(tether_io io, const std::string &name) const {
        DeviceBuffer b{0, 0};
        detail::check(tether_network_device_buffer(n_, io, name.c_str(), &b.address, &b.size));
        return b;
    }
    /// Run once ordered on the caller's CUDA stream (a CUstream or cudaStream_t; nullptr: the
    /// legacy default stream), without waiting (tether_network_run_on_stream): with
    /// TETHER_MEMORY_DEVICE on the device buffers, with TETHER_MEMORY_HOST on the host
    /// buffers once the stream reaches the run. Throws Error (TETHER_ERR_UNSUPPORTED) on the
    /// CPU.
    void run_on_stream(void *stream, tether_memory memory = TETHER_MEMORY_DEVICE) {
        detail::check(tether_network_run_on_stream(n_, stream, memory));
    }
    tether_network *handle() const noexcept { return n_; }

private:
    static const char *dtype_name(uint32_t dtype) noexcept {
        switch (dtype) {
        case TETHER_DTYPE_F32: return "f32";
        case TETHER_DTYPE_F16: return "f16";
        case TETHER_DTYPE_BF16: return "bf16";
        case TETHER_DTYPE_I8: return "i8";
        case TETHER_DTYPE_U8: return "u8";
        case TETHER_DTYPE_I32: return "i32";
        case TETHER_DTYPE_I64: return "i64";
        case TETHER_DTYPE_BOOL: return "bool";
        default: return "of an unknown dtype";
        }
    }
    /// Whether element type T reads and writes tensors of tether_dtype `dtype`.
    template <class T> static constexpr bool type_fits(uint32_t dtype) noexcept {
        if constexpr (std::is_same_v<T, float>) return dtype == TETHER_DTYPE_F32;
        else if constexpr (std::is_same_v<T, uint16_t>) return dtype == TETHER_DTYPE_F16;
        else if constexpr (std::is_same_v<T, int64_t>) return dtype == TETHER_DTYPE_I64;
        else if constexpr (std::is_same_v<T, int32_t>) return dtype == TETHER_DTYPE_I32;
        else if constexpr (std::is_same_v<T, int8_t>) return dtype == TETHER_DTYPE_I8;
        else if constexpr (std::is_same_v<T, uint8_t>) return dtype == TETHER_DTYPE_U8 || dtype == TETHER_DTYPE_BOOL;
        else return false;
    }
    /// Throw Error (TETHER_ERR_INVALID_ARGUMENT) when tensor `name` is not of T's element
    /// type; an unknown name is left to the C call, whose message lists the tensors. No
    /// allocation unless it throws.
    template <class T> void check_type(tether_io io, const std::string &name) const {
        std::size_t count = 0;
        detail::check(tether_network_tensor_count(n_, io, &count));
        for (std::size_t i = 0; i < count; i++) {
            tether_tensor_info t;
            detail::check(tether_network_tensor(n_, io, i, &t));
            if (name != t.name) continue;
            if (!type_fits<T>(t.dtype))
                throw Error(TETHER_ERR_INVALID_ARGUMENT,
                            "tensor `" + name + "` is " + dtype_name(t.dtype) +
                                ": not readable or writable as the element type asked for (" +
                                std::to_string(sizeof(T)) + "-byte elements)");
            return;
        }
    }

    tether_network *n_ = nullptr;
};

/// A text generator (an `llm` bundle, a GGUF file or a Hugging Face directory). Move-only;
/// cancel() may be called from any thread while another runs generate().
class Generator {
public:
    explicit Generator(const std::string &path, uint32_t threads = 0, uint32_t context = 0) {
        tether_generator_options o{};
        detail::check(tether_generator_options_init(&o));
        o.threads = threads;
        o.context = context;
        detail::check(tether_generator_open(path.c_str(), &o, &g_));
    }
    Generator(Generator &&o) noexcept : g_(std::exchange(o.g_, nullptr)), last_(o.last_) {}
    Generator &operator=(Generator &&o) noexcept {
        if (this != &o) {
            tether_generator_close(g_);
            g_ = std::exchange(o.g_, nullptr);
            last_ = o.last_;
        }
        return *this;
    }
    Generator(const Generator &) = delete;
    Generator &operator=(const Generator &) = delete;
    ~Generator() { tether_generator_close(g_); }

    /// The model's request defaults (tether_generate_params_init).
    tether_generate_params defaults() const {
        tether_generate_params p{};
        detail::check(tether_generate_params_init(g_, &p));
        return p;
    }

    /// Generate from `prompt`, calling `on_piece(std::string_view text, int32_t token)` for
    /// each piece; it returns true to go on, false to stop. Returns the result; a stop
    /// (by on_piece or cancel()) throws Error(TETHER_ERR_CANCELLED). An exception thrown by
    /// on_piece stops the generation and is rethrown here (it never crosses the C library).
    template <class F>
    tether_generate_result generate(std::string_view prompt, const tether_generate_params &params, F &&on_piece) {
        struct Ctx {
            F *f;
            std::exception_ptr error;
        } ctx{&on_piece, nullptr};
        auto trampoline = [](void *user, const char *text, std::size_t size, int32_t token) -> int32_t {
            auto *c = static_cast<Ctx *>(user);
            try {
                return (*c->f)(std::string_view(text, size), token) ? 0 : 1;
            } catch (...) {
                c->error = std::current_exception();
                return 1;
            }
        };
        tether_generate_result r{};
        tether_status s = tether_generate(g_, reinterpret_cast<const uint8_t *>(prompt.data()), prompt.size(),
                                          &params, trampoline, &ctx, &r);
        last_ = r;
        if (ctx.error) std::rethrow_exception(ctx.error);
        detail::check(s);
        return r;
    }

    /// The result of the last generate() call, also when it threw (a cancelled request's
    /// counts and timings; zeros before the first call).
    const tether_generate_result &last_result() const noexcept { return last_; }

    /// Stop the generation running on another thread (thread-safe).
    void cancel() const noexcept { tether_generator_cancel(g_); }
    tether_generator *handle() const noexcept { return g_; }

private:
    tether_generator *g_ = nullptr;
    tether_generate_result last_{};
};

} // namespace tether

#endif // TETHER_TETHER_HPP
