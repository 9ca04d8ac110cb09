// The ROS-independent core of tether_detect_node: an image message in (the fields of
// sensor_msgs/msg/Image), a detection array out (the fields of vision_msgs/msg/Detection2DArray),
// through libtether's C++ wrapper and the detector's staging buffer. The ROS 2 node
// (src/tether_detect_node.cpp) and the ROS-free twin (src/standalone.cpp) share it, so the
// code the test runs is the code the node runs.
#ifndef TETHER_DETECT_NODE_DETECT_CORE_HPP
#define TETHER_DETECT_NODE_DETECT_CORE_HPP

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <tether/tether.hpp>

namespace tether_detect_node {

/// The fields of sensor_msgs/msg/Image this node reads (data borrowed, not owned).
struct ImageIn {
    int32_t stamp_sec = 0;
    uint32_t stamp_nanosec = 0;
    std::string frame_id;
    uint32_t height = 0;
    uint32_t width = 0;
    std::string encoding; ///< sensor_msgs/image_encodings names: rgb8, bgr8, rgba8, mono8
    uint32_t step = 0;    ///< bytes per row
    const uint8_t *data = nullptr;
    std::size_t size = 0; ///< bytes at data (at least step * height)
};

/// One vision_msgs/msg/Detection2D as this node fills it: the box as centre and size in
/// pixels, one hypothesis (class name, score).
struct Detection2D {
    double center_x = 0, center_y = 0, size_x = 0, size_y = 0;
    std::string class_id;
    double score = 0;
};

/// vision_msgs/msg/Detection2DArray: the image's header and its detections, best first.
struct Detection2DArray {
    int32_t stamp_sec = 0;
    uint32_t stamp_nanosec = 0;
    std::string frame_id;
    std::vector<Detection2D> detections;
};

/// The pixel format of a sensor_msgs encoding, or false when the detector cannot take it
/// (16-bit, Bayer, YUV: convert upstream, e.g. with image_proc).
inline bool pixel_format(const std::string &encoding, tether_pixel_format &format, uint32_t &bpp) {
    if (encoding == "rgb8") {
        format = TETHER_PIXEL_RGB8, bpp = 3;
    } else if (encoding == "bgr8") {
        format = TETHER_PIXEL_BGR8, bpp = 3;
    } else if (encoding == "rgba8") {
        format = TETHER_PIXEL_RGBA8, bpp = 4;
    } else if (encoding == "mono8") {
        format = TETHER_PIXEL_GRAY8, bpp = 1;
    } else {
        return false;
    }
    return true;
}

/// The detector and its reusable output storage. One per subscription; not thread-safe
/// (a ROS 2 single-threaded executor, or a mutually exclusive callback group).
class DetectCore {
public:
    explicit DetectCore(const std::string &bundle, const tether::Options &options = tether::Options())
        : detector_(bundle, options), dets_(300) {}

    /// Detect in `image` into `out` (its header copied). Each frame is written into the
    /// detector's staging buffer (prepared again when the geometry or encoding changes) and
    /// detected there: the one copy of the frame is the one a ROS subscription needs anyway
    /// (the message is the middleware's). Throws tether::Error for an encoding the detector
    /// cannot take or a message smaller than step * height.
    void on_image(const ImageIn &image, Detection2DArray &out) {
        tether_pixel_format format;
        uint32_t bpp = 0;
        if (!pixel_format(image.encoding, format, bpp)) {
            throw tether::Error(TETHER_ERR_INVALID_ARGUMENT,
                                "image encoding `" + image.encoding + "` is not rgb8, bgr8, rgba8 or mono8");
        }
        if (image.step < image.width * bpp || image.size < std::size_t(image.step) * image.height) {
            throw tether::Error(TETHER_ERR_INVALID_ARGUMENT,
                                "image " + std::to_string(image.width) + "x" + std::to_string(image.height) + " " +
                                    image.encoding + ": step " + std::to_string(image.step) + ", " +
                                    std::to_string(image.size) + " bytes of data");
        }
        if (image.width != width_ || image.height != height_ || image.step != step_ || format != format_) {
            detector_.prepare(image.width, image.height, image.step, format);
            staging_ = detector_.staging();
            width_ = image.width, height_ = image.height, step_ = image.step, format_ = format;
        }
        std::memcpy(staging_.data, image.data, std::size_t(image.step) * image.height);
        std::size_t n = detector_.detect_staged(dets_.data(), dets_.size());
        out.stamp_sec = image.stamp_sec;
        out.stamp_nanosec = image.stamp_nanosec;
        out.frame_id = image.frame_id;
        out.detections.resize(n);
        for (std::size_t i = 0; i < n; i++) {
            const tether::Detection &d = dets_[i];
            Detection2D &o = out.detections[i];
            o.center_x = 0.5 * (double(d.x1) + double(d.x2));
            o.center_y = 0.5 * (double(d.y1) + double(d.y2));
            o.size_x = double(d.x2) - double(d.x1);
            o.size_y = double(d.y2) - double(d.y1);
            o.class_id.assign(detector_.class_name(d.class_id));
            o.score = d.score;
        }
    }

    /// The raw detections of the last frame (corner boxes, as the C API gives them).
    const tether::Detection *last() const noexcept { return dets_.data(); }

private:
    tether::Detector detector_;
    std::vector<tether::Detection> dets_;
    tether::StagingBuffer staging_{};
    uint32_t width_ = 0, height_ = 0, step_ = 0;
    tether_pixel_format format_ = TETHER_PIXEL_RGB8;
};

} // namespace tether_detect_node

#endif
