// tether_detect_node: a ROS 2 (rclcpp) node that runs a tether `detect` bundle on every
// sensor_msgs/msg/Image it receives and publishes vision_msgs/msg/Detection2DArray.
//
//   ros2 run tether_detect_node tether_detect_node --ros-args -p bundle:=/path/yolov8n.bundle \
//       -r image:=/camera/color/image_raw -r detections:=/detections
//
// Parameters: `bundle` (path, required), `device` ("auto", "cpu", "cuda"; default "auto").
// Encodings rgb8, bgr8, rgba8 and mono8 go straight into the detector's staging buffer (one
// copy, the one a subscription needs); others are refused with an error log (convert them
// upstream, e.g. with image_proc). The detection itself is detect_core.hpp, shared with the
// ROS-free twin src/standalone.cpp that the repository's tests build and run.
#include <memory>
#include <string>

#include <rclcpp/rclcpp.hpp>
#include <sensor_msgs/msg/image.hpp>
#include <vision_msgs/msg/detection2_d_array.hpp>

#include "tether_detect_node/detect_core.hpp"

namespace tether_detect_node {

class TetherDetectNode : public rclcpp::Node {
public:
    explicit TetherDetectNode(const rclcpp::NodeOptions &options = rclcpp::NodeOptions())
        : rclcpp::Node("tether_detect_node", options) {
        const std::string bundle = declare_parameter<std::string>("bundle", "");
        const std::string device = declare_parameter<std::string>("device", "auto");
        if (bundle.empty()) throw std::runtime_error("parameter `bundle` (a detect bundle's path) is required");
        tether::Options o;
        if (device == "cpu") o.device(TETHER_DEVICE_CPU);
        else if (device == "cuda") o.device(TETHER_DEVICE_CUDA);
        core_ = std::make_unique<DetectCore>(bundle, o);
        pub_ = create_publisher<vision_msgs::msg::Detection2DArray>("detections", 10);
        sub_ = create_subscription<sensor_msgs::msg::Image>(
            "image", rclcpp::SensorDataQoS(),
            [this](sensor_msgs::msg::Image::ConstSharedPtr msg) { on_image(*msg); });
        RCLCPP_INFO(get_logger(), "tether %s: detecting with %s", tether_version(), bundle.c_str());
    }

private:
    void on_image(const sensor_msgs::msg::Image &msg) {
        ImageIn in;
        in.stamp_sec = msg.header.stamp.sec;
        in.stamp_nanosec = msg.header.stamp.nanosec;
        in.frame_id = msg.header.frame_id;
        in.height = msg.height;
        in.width = msg.width;
        in.encoding = msg.encoding;
        in.step = msg.step;
        in.data = msg.data.data();
        in.size = msg.data.size();
        try {
            core_->on_image(in, result_);
        } catch (const tether::Error &e) {
            RCLCPP_ERROR_THROTTLE(get_logger(), *get_clock(), 5000, "%s: %s", e.status_name(), e.what());
            return;
        }
        vision_msgs::msg::Detection2DArray out;
        out.header = msg.header;
        out.detections.resize(result_.detections.size());
        for (std::size_t i = 0; i < result_.detections.size(); i++) {
            const Detection2D &d = result_.detections[i];
            vision_msgs::msg::Detection2D &o = out.detections[i];
            o.header = msg.header;
            o.bbox.center.position.x = d.center_x;
            o.bbox.center.position.y = d.center_y;
            o.bbox.size_x = d.size_x;
            o.bbox.size_y = d.size_y;
            vision_msgs::msg::ObjectHypothesisWithPose h;
            h.hypothesis.class_id = d.class_id;
            h.hypothesis.score = d.score;
            o.results.push_back(h);
        }
        pub_->publish(out);
    }

    std::unique_ptr<DetectCore> core_;
    Detection2DArray result_;
    rclcpp::Publisher<vision_msgs::msg::Detection2DArray>::SharedPtr pub_;
    rclcpp::Subscription<sensor_msgs::msg::Image>::SharedPtr sub_;
};

} // namespace tether_detect_node

int main(int argc, char **argv) {
    rclcpp::init(argc, argv);
    rclcpp::spin(std::make_shared<tether_detect_node::TetherDetectNode>());
    rclcpp::shutdown();
    return 0;
}
