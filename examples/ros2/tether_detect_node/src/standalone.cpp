// The ROS-free twin of tether_detect_node, for machines without ROS 2: the same structure
// (an image callback, a publisher of the result message, an executor spinning at a fixed
// rate) with plain C++ in place of rclcpp, and the same detection code (detect_core.hpp).
//
//   tether_detect_standalone BUNDLE --image FILE WxH ENCODING [--image ...] [--hz 30]
//                            [--frames N]
//
// Each --image is one raw frame (ENCODING rgb8, bgr8, rgba8 or mono8; the row step is the
// file's size / H, so rows may be padded); the "camera" publishes them in turn on the image
// topic, one per period. The node's callback detects and publishes a Detection2DArray; the
// subscriber here prints each as one JSON line (the fields of vision_msgs/msg/Detection2DArray).
// A frame the detector cannot take is logged to stderr and publishes nothing, as the node
// does. Stops after N frames (default: one pass over the images) or on Ctrl-C.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "tether_detect_node/detect_core.hpp"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void on_sigint(int) { g_stop = 1; }

/// A topic: publish() hands the message to every subscriber, in the publisher's thread
/// (rclcpp's intra-process delivery to a single-threaded executor, without the queue).
template <class Msg> class Topic {
public:
    void subscribe(std::function<void(const Msg &)> f) { subs_.push_back(std::move(f)); }
    void publish(const Msg &m) const {
        for (const auto &f : subs_) f(m);
    }

private:
    std::vector<std::function<void(const Msg &)>> subs_;
};

/// A frame as a camera driver hands it over: the pixels it owns and the message fields.
struct Frame {
    std::vector<uint8_t> pixels;
    uint32_t width = 0, height = 0, step = 0;
    std::string encoding, frame_id;
};

[[noreturn]] void usage() {
    std::fprintf(stderr, "usage: tether_detect_standalone BUNDLE --image FILE WxH ENCODING [--image ...] "
                         "[--hz 30] [--frames N]\n");
    std::exit(2);
}

void json_string(const std::string &s) {
    std::putchar('"');
    for (char ch : s) {
        auto c = static_cast<unsigned char>(ch);
        if (c == '"' || c == '\\') {
            std::putchar('\\');
            std::putchar(c);
        } else if (c < 0x20) {
            std::printf("\\u%04x", c);
        } else {
            std::putchar(c);
        }
    }
    std::putchar('"');
}

/// The subscriber of the detections topic: one JSON line per message.
void print(const tether_detect_node::Detection2DArray &m) {
    std::printf("{\"header\":{\"stamp\":{\"sec\":%d,\"nanosec\":%u},\"frame_id\":", m.stamp_sec, m.stamp_nanosec);
    json_string(m.frame_id);
    std::printf("},\"detections\":[");
    for (std::size_t i = 0; i < m.detections.size(); i++) {
        const auto &d = m.detections[i];
        std::printf("%s{\"bbox\":{\"center\":{\"position\":{\"x\":%.17g,\"y\":%.17g}},\"size_x\":%.17g,"
                    "\"size_y\":%.17g},\"results\":[{\"hypothesis\":{\"class_id\":",
                    i ? "," : "", d.center_x, d.center_y, d.size_x, d.size_y);
        json_string(d.class_id);
        std::printf(",\"score\":%.17g}}]}", d.score);
    }
    std::printf("]}\n");
    std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv) {
    std::signal(SIGINT, on_sigint);
    std::string bundle;
    std::vector<Frame> frames;
    double hz = 30.0;
    long long limit = -1;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if (a == "--image" && i + 3 < argc) {
            Frame f;
            std::ifstream in(argv[i + 1], std::ios::binary);
            f.pixels.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
            if (std::sscanf(argv[i + 2], "%ux%u", &f.width, &f.height) != 2 || f.height == 0) usage();
            f.encoding = argv[i + 3];
            f.step = uint32_t(f.pixels.size() / f.height);
            f.frame_id = "camera_" + std::to_string(frames.size());
            frames.push_back(std::move(f));
            i += 3;
        } else if (a == "--hz" && i + 1 < argc) {
            hz = std::atof(argv[++i]);
        } else if (a == "--frames" && i + 1 < argc) {
            limit = std::atoll(argv[++i]);
        } else if (!a.empty() && a[0] != '-' && bundle.empty()) {
            bundle = a;
        } else {
            usage();
        }
    }
    if (bundle.empty() || frames.empty() || !(hz > 0.0)) usage();
    if (limit < 0) limit = static_cast<long long>(frames.size());

    try {
        // The node: a subscription on the image topic, a publisher on the detections topic.
        Topic<tether_detect_node::ImageIn> image_topic;
        Topic<tether_detect_node::Detection2DArray> detections_topic;
        detections_topic.subscribe(print);
        tether_detect_node::DetectCore core(bundle);
        tether_detect_node::Detection2DArray result;
        image_topic.subscribe([&](const tether_detect_node::ImageIn &msg) {
            try {
                core.on_image(msg, result);
            } catch (const tether::Error &e) {
                std::fprintf(stderr, "tether_detect_standalone: %s: %s\n", e.status_name(), e.what());
                return;
            }
            detections_topic.publish(result);
        });

        // The executor: one camera frame per period, delivered to the callback.
        using clock = std::chrono::steady_clock;
        const auto period = std::chrono::duration_cast<clock::duration>(std::chrono::duration<double>(1.0 / hz));
        auto next = clock::now();
        for (long long n = 0; n < limit && !g_stop; n++) {
            const Frame &f = frames[std::size_t(n) % frames.size()];
            tether_detect_node::ImageIn msg;
            auto since_epoch = std::chrono::system_clock::now().time_since_epoch();
            auto sec = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
            msg.stamp_sec = int32_t(sec.count());
            msg.stamp_nanosec = uint32_t(std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - sec).count());
            msg.frame_id = f.frame_id;
            msg.width = f.width;
            msg.height = f.height;
            msg.step = f.step;
            msg.encoding = f.encoding;
            msg.data = f.pixels.data();
            msg.size = f.pixels.size();
            image_topic.publish(msg);
            next += period;
            std::this_thread::sleep_until(next);
        }
    } catch (const tether::Error &e) {
        std::fprintf(stderr, "tether_detect_standalone: %s: %s\n", e.status_name(), e.what());
        return 1;
    }
    return 0;
}
