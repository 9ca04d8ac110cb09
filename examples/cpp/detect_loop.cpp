// A robot's perception loop in C++: detect on every frame at a fixed rate through
// libtether's C++ wrapper, count missed deadlines; Ctrl-C (SIGINT) stops it cleanly with a
// summary. The C++ twin of examples/detect_loop.rs.
//
//   detect_loop BUNDLE [--hz 30] [--frames N] [--raw FRAME.rgb --size WxH] [--json]
//
// Frames: a raw RGB8 file (`--raw`, e.g. `ffmpeg -i img.png -pix_fmt rgb24 -f rawvideo f.rgb`)
// or, by default, a synthetic 640x480 test pattern. Each frame is written into the
// detector's staging buffer (as a camera driver would write it in place) and detected there:
// the loop allocates nothing. `--json` prints the summary and the last frame's detections as
// one JSON object.
//
// Build (after capi/install.sh PREFIX):
//   c++ -std=c++17 -O2 detect_loop.cpp $(pkg-config --cflags --libs tether) -o detect_loop
// or with CMake: see CMakeLists.txt next to this file.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <tether/tether.hpp>

namespace {

volatile std::sig_atomic_t g_stop = 0;

void on_sigint(int) { g_stop = 1; }

[[noreturn]] void usage() {
    std::fprintf(stderr,
                 "usage: detect_loop BUNDLE [--hz 30] [--frames N] [--raw FRAME.rgb --size WxH] [--json]\n");
    std::exit(2);
}

struct Args {
    std::string bundle;
    double hz = 30.0;
    long long frames = -1; // -1: until Ctrl-C
    std::string raw;
    unsigned width = 640, height = 480;
    bool json = false;
};

Args parse(int argc, char **argv) {
    Args a;
    for (int i = 1; i < argc; i++) {
        std::string s = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage();
            return argv[++i];
        };
        if (s == "--hz") {
            a.hz = std::atof(value().c_str());
        } else if (s == "--frames") {
            a.frames = std::atoll(value().c_str());
        } else if (s == "--raw") {
            a.raw = value();
        } else if (s == "--size") {
            std::string v = value();
            if (std::sscanf(v.c_str(), "%ux%u", &a.width, &a.height) != 2) usage();
        } else if (s == "--json") {
            a.json = true;
        } else if (!s.empty() && s[0] == '-') {
            usage();
        } else {
            a.bundle = s;
        }
    }
    if (a.bundle.empty() || !(a.hz > 0.0) || a.width == 0 || a.height == 0) usage();
    return a;
}

// The frame: the raw file's pixels, or a synthetic pattern (gradients and a bright square).
std::vector<uint8_t> load_frame(const Args &a) {
    std::size_t bytes = std::size_t(a.width) * a.height * 3;
    std::vector<uint8_t> px(bytes);
    if (!a.raw.empty()) {
        std::ifstream f(a.raw, std::ios::binary);
        if (!f.read(reinterpret_cast<char *>(px.data()), std::streamsize(bytes))) {
            std::fprintf(stderr, "detect_loop: %s does not hold %ux%u RGB8 pixels (%zu bytes)\n",
                         a.raw.c_str(), a.width, a.height, bytes);
            std::exit(1);
        }
        return px;
    }
    for (unsigned y = 0; y < a.height; y++) {
        for (unsigned x = 0; x < a.width; x++) {
            uint8_t *p = &px[(std::size_t(y) * a.width + x) * 3];
            bool square = x > a.width / 3 && x < a.width / 2 && y > a.height / 3 && y < a.height / 2;
            p[0] = square ? 250 : uint8_t(x * 255 / a.width);
            p[1] = square ? 250 : uint8_t(y * 255 / a.height);
            p[2] = square ? 250 : 96;
        }
    }
    return px;
}

void print_json_string(std::string_view s) {
    std::putchar('"');
    for (char c : s) {
        if (c == '"' || c == '\\') {
            std::putchar('\\');
            std::putchar(c);
        } else if (static_cast<unsigned char>(c) < 0x20) {
            std::printf("\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));  // JSON's control characters
        } else {
            std::putchar(c);
        }
    }
    std::putchar('"');
}

} // namespace

int main(int argc, char **argv) {
    Args a = parse(argc, argv);
    std::vector<uint8_t> frame = load_frame(a);
    try {
        tether::Detector detector(a.bundle);
        const std::size_t pitch = std::size_t(a.width) * 3;
        detector.prepare(a.width, a.height, pitch, TETHER_PIXEL_RGB8);
        tether::StagingBuffer staging = detector.staging();

        std::signal(SIGINT, on_sigint);
        using clock = std::chrono::steady_clock;
        const auto period = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(1.0 / a.hz));
        tether::Detection dets[300];
        std::size_t n = 0;
        long long frames = 0, misses = 0;
        double total_ms = 0.0, worst_ms = 0.0;
        auto deadline = clock::now() + period;
        while (!g_stop && (a.frames < 0 || frames < a.frames)) {
            auto t0 = clock::now();
            // The camera's write: the frame straight into the staging buffer.
            for (unsigned y = 0; y < a.height; y++) {
                std::memcpy(staging.data + y * staging.pitch, frame.data() + y * pitch, pitch);
            }
            n = detector.detect_staged(dets, 300);
            auto t1 = clock::now();
            double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
            total_ms += ms;
            worst_ms = std::max(worst_ms, ms);
            frames++;
            if (t1 > deadline) {
                misses++;
                // Skip the periods already lost; the next frame starts a fresh period.
                while (deadline < t1) deadline += period;
            }
            // To the deadline in slices of at most 10 ms: std::this_thread::sleep_until
            // resumes its sleep after a signal, so one long period would hold Ctrl-C back.
            while (!g_stop && clock::now() < deadline) {
                std::this_thread::sleep_until(std::min(deadline, clock::now() + std::chrono::milliseconds(10)));
            }
            deadline += period;
        }
        double mean = frames ? total_ms / double(frames) : 0.0;
        if (a.json) {
            std::printf("{\"frames\":%lld,\"deadline_misses\":%lld,\"hz\":%g,\"stopped_by_signal\":%s,"
                        "\"latency_ms\":{\"mean\":%.3f,\"max\":%.3f},\"detections\":[",
                        frames, misses, a.hz, g_stop ? "true" : "false", mean, worst_ms);
            for (std::size_t i = 0; i < n; i++) {
                std::printf("%s{\"class_id\":%u,\"class_name\":", i ? "," : "", dets[i].class_id);
                print_json_string(detector.class_name(dets[i].class_id));
                std::printf(",\"score\":%.9g,\"box\":[%.9g,%.9g,%.9g,%.9g]}", dets[i].score, dets[i].x1,
                            dets[i].y1, dets[i].x2, dets[i].y2);
            }
            std::printf("]}\n");
        } else {
            std::printf("%lld frames at %g Hz, %lld deadline misses, latency mean %.3f ms, max %.3f ms%s\n",
                        frames, a.hz, misses, mean, worst_ms, g_stop ? " (stopped by Ctrl-C)" : "");
            for (std::size_t i = 0; i < n; i++) {
                std::string_view name = detector.class_name(dets[i].class_id);
                std::printf("  %.*s %.3f [%.1f, %.1f, %.1f, %.1f]\n", int(name.size()), name.data(),
                            dets[i].score, dets[i].x1, dets[i].y1, dets[i].x2, dets[i].y2);
            }
        }
    } catch (const tether::Error &e) {
        std::fprintf(stderr, "detect_loop: %s: %s\n", e.status_name(), e.what());
        return 1;
    }
    return 0;
}
