// Streaming text generation in C++ through libtether's wrapper: each piece is printed as it
// comes; Ctrl-C (SIGINT) stops the generation cleanly (the piece callback returns false, the
// library ends the request as cancelled) and the summary is still printed.
//
//   generate MODEL --prompt TEXT [--max-tokens 256] [--temperature T] [--seed S]
//            [--threads N] [--context N] [--raw] [--json]
//
// MODEL: an `llm` bundle, a GGUF file or a Hugging Face checkpoint directory. Sampling starts
// from the model's recommended defaults (tether_generate_params_init, as `tether run` does);
// `--temperature 0` is greedy decoding. The prompt is sent as the user message of a chat in the
// model's template, or as it is with `--raw`. Without `--json` the pieces stream to stdout and
// a one-line summary goes to stderr; with `--json` nothing streams and one JSON object is
// printed at the end: the text, the generated token ids, the finish reason ("stop", "length",
// "cancelled"), token counts and timings.
//
// Build (after capi/install.sh PREFIX):
//   c++ -std=c++17 -O2 generate.cpp $(pkg-config --cflags --libs tether) -o generate
// or with CMake: see CMakeLists.txt next to this file.
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include <tether/tether.hpp>

namespace {

volatile std::sig_atomic_t g_stop = 0;

void on_sigint(int) { g_stop = 1; }

[[noreturn]] void usage() {
    std::fprintf(stderr, "usage: generate MODEL --prompt TEXT [--max-tokens 256] [--temperature T] [--seed S]\n"
                         "                [--threads N] [--context N] [--raw] [--json]\n");
    std::exit(2);
}

struct Args {
    std::string model;
    std::string prompt;
    long max_tokens = 256;
    bool has_temperature = false;
    float temperature = 0.0f;
    bool has_seed = false;
    unsigned long long seed = 0;
    unsigned threads = 0; // 0: every CPU
    unsigned context = 0; // 0: the model's training context
    bool raw = false;
    bool json = false;
    bool has_prompt = false;
};

Args parse(int argc, char **argv) {
    Args a;
    for (int i = 1; i < argc; i++) {
        std::string s = argv[i];
        auto value = [&]() -> std::string {
            if (i + 1 >= argc) usage();
            return argv[++i];
        };
        if (s == "--prompt") {
            a.prompt = value();
            a.has_prompt = true;
        } else if (s == "--max-tokens") {
            a.max_tokens = std::atol(value().c_str());
        } else if (s == "--temperature") {
            a.temperature = std::strtof(value().c_str(), nullptr);
            a.has_temperature = true;
        } else if (s == "--seed") {
            a.seed = std::strtoull(value().c_str(), nullptr, 10);
            a.has_seed = true;
        } else if (s == "--threads") {
            a.threads = unsigned(std::atol(value().c_str()));
        } else if (s == "--context") {
            a.context = unsigned(std::atol(value().c_str()));
        } else if (s == "--raw") {
            a.raw = true;
        } else if (s == "--json") {
            a.json = true;
        } else if (!s.empty() && s[0] == '-') {
            usage();
        } else {
            a.model = s;
        }
    }
    if (a.model.empty() || !a.has_prompt || a.max_tokens < 1 || a.max_tokens > UINT32_MAX) usage();
    return a;
}

// A JSON string: quotes, backslashes and control characters escaped; other bytes (UTF-8) as
// they are.
void print_json_string(std::string_view s) {
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

const char *finish_name(uint32_t f) {
    switch (f) {
    case TETHER_FINISH_STOP: return "stop";
    case TETHER_FINISH_LENGTH: return "length";
    case TETHER_FINISH_CANCELLED: return "cancelled";
    default: return "unknown";
    }
}

} // namespace

int main(int argc, char **argv) {
    // Before anything slow, so that an early Ctrl-C is a clean stop too.
    std::signal(SIGINT, on_sigint);
    Args a = parse(argc, argv);
    try {
        tether::Generator generator(a.model, a.threads, a.context);
        tether_generate_params params = generator.defaults();
        params.max_tokens = uint32_t(a.max_tokens);
        if (a.has_temperature) params.temperature = a.temperature;
        if (a.has_seed) params.seed = a.seed;
        params.raw = a.raw ? 1 : 0;

        // The pieces' bytes in order (a piece may end inside a UTF-8 character; the whole is
        // UTF-8) and the generated token ids (the final flush has token -1).
        std::string text;
        std::vector<int32_t> tokens;
        bool stopped_by_signal = false;
        tether_generate_result r{};
        try {
            r = generator.generate(a.prompt, params, [&](std::string_view piece, int32_t token) {
                text.append(piece);
                if (token >= 0) tokens.push_back(token);
                if (!a.json) {
                    std::fwrite(piece.data(), 1, piece.size(), stdout);
                    std::fflush(stdout);
                }
                // Ctrl-C: stop here; the library ends the request as cancelled.
                return g_stop == 0;
            });
        } catch (const tether::Error &e) {
            if (e.status() != TETHER_ERR_CANCELLED) throw;
            // Only this program's callback stops it: the request ended as cancelled, its
            // counts and timings are kept by the wrapper.
            stopped_by_signal = true;
            r = generator.last_result();
        }
        if (a.json) {
            std::printf("{\"text\":");
            print_json_string(text);
            std::printf(",\"tokens\":[");
            for (std::size_t i = 0; i < tokens.size(); i++) std::printf("%s%d", i ? "," : "", tokens[i]);
            std::printf("],\"finish_reason\":\"%s\",\"stopped_by_signal\":%s,\"prompt_tokens\":%u,"
                        "\"generated_tokens\":%u,\"prompt_ms\":%.3f,\"time_to_first_token_ms\":%.3f,"
                        "\"generation_ms\":%.3f}\n",
                        finish_name(r.finish_reason), stopped_by_signal ? "true" : "false", r.prompt_tokens,
                        r.generated_tokens, r.prompt_ms, r.time_to_first_token_ms, r.generation_ms);
        } else {
            std::printf("\n");
            double tps = r.generation_ms > 0.0 && r.generated_tokens > 1
                             ? double(r.generated_tokens - 1) * 1000.0 / r.generation_ms
                             : 0.0;
            std::fprintf(stderr, "generate: %u prompt tokens, %u generated, finish %s%s, %.1f tokens/s\n",
                         r.prompt_tokens, r.generated_tokens, finish_name(r.finish_reason),
                         stopped_by_signal ? " (stopped by Ctrl-C)" : "", tps);
        }
    } catch (const tether::Error &e) {
        std::fprintf(stderr, "generate: %s: %s\n", e.status_name(), e.what());
        return 1;
    }
    return 0;
}
