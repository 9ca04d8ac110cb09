// The C++ wrapper (tether.hpp) from C++17, driven by capi/tests/c_api.rs:
//   wrapper_test DETECT_BUNDLE VAD_BUNDLE EMBED_BUNDLE FRAME.rgb WIDTH HEIGHT LLM_BUNDLE
//                OCR_BUNDLE PAGE.gray PAGE_WIDTH PAGE_HEIGHT PCM.f32
// prints one JSON object: exceptions' statuses and messages, detections after a move, an
// embedding's norm, the text lines of a page (read twice: the buffers grow once), the VAD
// bundle's network through tether::Network, a generation streamed through a lambda, one stopped by it, and an
// exception thrown by it carried back.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <tether/tether.hpp>

static void print_error(const char *key, const tether::Error &e) {
    std::printf("\"%s\":{\"status\":\"%s\",\"message\":\"", key, e.status_name());
    for (const char *c = e.what(); *c; c++) {
        if (*c == '"' || *c == '\\') std::putchar('\\');
        std::putchar(*c);
    }
    std::printf("\"},");
}

int main(int argc, char **argv) {
    if (argc != 13) return 2;
    std::ifstream f(argv[4], std::ios::binary);
    std::vector<uint8_t> rgb((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    uint32_t w = uint32_t(std::atoi(argv[5])), h = uint32_t(std::atoi(argv[6]));
    std::printf("{");
    try {
        tether::Detector d("/nonexistent/missing.bundle");
    } catch (const tether::Error &e) {
        print_error("missing", e);
    }
    try {
        tether::VoiceActivity v(argv[1]);
    } catch (const tether::Error &e) {
        print_error("wrong_family", e);
    }
    tether::Detector first(argv[1], tether::Options().device(TETHER_DEVICE_AUTO).threads(1));
    tether::Detector det = std::move(first); // move-only: `first` is empty now
    tether::ImageView view{rgb.data(), w, h, std::size_t(w) * 3, TETHER_PIXEL_RGB8};
    tether::Detection dets[300];
    std::size_t n = det.detect(view, dets, 300);
    std::printf("\"detections\":%zu,\"first_class\":\"%s\",", n,
                n ? std::string(det.class_name(dets[0].class_id)).c_str() : "");
    try {
        det.detect(view, dets, 0);
    } catch (const tether::Error &e) {
        std::printf("\"capacity\":\"%s\",", e.status_name());
    }
    tether::VoiceActivity vad(argv[2]);
    std::vector<float> silence(1600, 0.0f);
    tether_vad_chunk chunks[4];
    std::size_t c = vad.push(silence.data(), silence.size(), 16000, chunks, 4);
    tether_vad_end end = vad.finish();
    std::printf("\"vad_chunks\":%zu,\"vad_last\":%u,\"vad_samples\":%llu,", c, end.has_last,
                (unsigned long long)end.samples);
    tether::Embedder emb(argv[3]);
    std::vector<float> e = emb.embed({"A robot arm picks a red cube from the table."});
    double norm = 0;
    for (float x : e) norm += double(x) * x;
    std::printf("\"embed_dim\":%zu,\"embed_norm\":%.6f,", e.size(), std::sqrt(norm));

    {
        std::ifstream pf(argv[9], std::ios::binary);
        std::vector<uint8_t> gray((std::istreambuf_iterator<char>(pf)), std::istreambuf_iterator<char>());
        uint32_t pw = uint32_t(std::atoi(argv[10])), ph = uint32_t(std::atoi(argv[11]));
        tether::Ocr ocr(argv[8]);
        tether::ImageView page{gray.data(), pw, ph, pw, TETHER_PIXEL_GRAY8};
        std::size_t first = ocr.read(page).size();
        const std::vector<tether::TextLine> &lines = ocr.read(page);
        std::printf("\"ocr_first_read\":%zu,\"ocr\":[", first);
        for (std::size_t i = 0; i < lines.size(); i++) {
            std::printf("%s{\"text\":\"", i ? "," : "");
            for (char c : lines[i].text) {
                if (c == '"' || c == '\\') std::putchar('\\');
                std::putchar(c);
            }
            std::printf("\",\"quad\":[");
            for (int k = 0; k < 8; k++) std::printf("%s%.9g", k ? "," : "", lines[i].quad[k]);
            std::printf("]}");
        }
        std::printf("],");
    }
    {
        // The VAD network: 576 samples copied in, the state written in place (zeros), sr.
        std::ifstream pf(argv[12], std::ios::binary);
        std::vector<char> raw((std::istreambuf_iterator<char>(pf)), std::istreambuf_iterator<char>());
        std::vector<float> pcm(576);
        std::memcpy(pcm.data(), raw.data(), pcm.size() * sizeof(float));
        tether::Network net(argv[2]);
        std::vector<tether_tensor_info> ins = net.tensors(TETHER_IO_INPUT);
        std::printf("\"net_inputs\":[");
        for (std::size_t i = 0; i < ins.size(); i++) std::printf("%s\"%s\"", i ? "," : "", ins[i].name);
        std::printf("],");
        const int64_t sr = 16000;
        net.set_input("sr", &sr, 1);
        net.set_input("input", pcm.data(), pcm.size());
        std::size_t n = 0;
        float *state = net.input<float>("state", n);
        for (std::size_t i = 0; i < n; i++) state[i] = 0.0f;
        net.run();
        const float *out = net.output<float>("output", n);
        std::printf("\"net_output\":%.9g,\"net_output_count\":%zu,", out[0], n);
        try {
            net.set_input("input", pcm.data(), 3);
        } catch (const tether::Error &e) {
            print_error("net_wrong_size", e);
        }
        // An element type other than the tensor's: thrown, not reinterpreted.
        try {
            std::size_t c = 0;
            net.output<double>("output", c);
            std::printf("\"net_wrong_type\":\"returned\",");
        } catch (const tether::Error &e) {
            print_error("net_wrong_type", e);
        }
        // On the CPU: no device buffers, no CUDA stream (thrown, with the device named).
        try {
            net.device_buffer(TETHER_IO_INPUT, "input");
            std::printf("\"net_device_buffer_cpu\":\"returned\",");
        } catch (const tether::Error &e) {
            print_error("net_device_buffer_cpu", e);
        }
        try {
            net.run_on_stream(nullptr);
            std::printf("\"net_run_on_stream_cpu\":\"returned\",");
        } catch (const tether::Error &e) {
            print_error("net_run_on_stream_cpu", e);
        }
    }
    tether::Generator gen(argv[7], 1);
    tether_generate_params p = gen.defaults();
    p.temperature = 0.0f;
    p.max_tokens = 24;
    std::string text;
    std::vector<int32_t> tokens;
    tether_generate_result r = gen.generate("What is a robot?", p, [&](std::string_view t, int32_t token) {
        text += t;
        if (token >= 0) tokens.push_back(token);
        return true;
    });
    std::printf("\"generated\":%u,\"tokens\":[", r.generated_tokens);
    for (std::size_t i = 0; i < tokens.size(); i++) std::printf("%s%d", i ? "," : "", tokens[i]);
    std::printf("],\"text\":\"");
    for (char c : text) {
        if (c == '"' || c == '\\') std::putchar('\\');
        if (c == '\n') {
            std::printf("\\n");
            continue;
        }
        std::putchar(c);
    }
    std::printf("\",");
    std::size_t seen = 0;
    try {
        gen.generate("What is a robot?", p, [&](std::string_view, int32_t) { return ++seen < 2; });
    } catch (const tether::Error &e) {
        std::printf("\"stopped\":\"%s\",\"stopped_after\":%zu,", e.status_name(), seen);
    }
    try {
        gen.generate("What is a robot?", p, [&](std::string_view, int32_t) -> bool { throw std::runtime_error("from the lambda"); });
    } catch (const tether::Error &e) {
        std::printf("\"rethrown\":\"wrong: %s\"}\n", e.status_name());
        return 0;
    } catch (const std::runtime_error &e) {
        std::printf("\"rethrown\":\"%s\"}\n", e.what());
        return 0;
    }
    std::printf("\"rethrown\":\"nothing\"}\n");
    return 0;
}
