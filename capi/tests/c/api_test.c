/* The C API from C, driven by capi/tests/c_api.rs (which builds the bundles, compares this
 * program's JSON with `tether run --json`, and checks the error paths' statuses and
 * messages). Built plain, under AddressSanitizer + UndefinedBehaviorSanitizer, and with
 * alloc_count.c (heap allocations counted per call).
 *
 *   api_test detect BUNDLE FRAME.rgb WIDTH HEIGHT   detections four ways (JSON)
 *   api_test vad BUNDLE PCM.f32                      chunk probabilities and segments
 *   api_test embed BUNDLE TEXTS.txt                  one embedding per line
 *   api_test errors DETECT VAD EMBED TRUNCATED JUNK LLM  one JSON line per error case
 *   api_test alloc BUNDLE FRAME.rgb WIDTH HEIGHT     allocations per call (alloc_count.c)
 *   api_test alloc_vad BUNDLE PCM.f32                allocations per tether_vad_push of a chunk
 *   api_test alloc_more OCR PAGE.gray W H VAD PCM.f32  allocations per tether_ocr, tether_network_run
 *   api_test generate BUNDLE PROMPT MAX_TOKENS       greedy text, streamed (JSON)
 *   api_test generate_cancel BUNDLE PROMPT           cancel from the callback, from a thread
 *   api_test ocr BUNDLE FRAME.gray WIDTH HEIGHT DETECT  text lines (JSON) and OCR's error cases
 *   api_test network BUNDLE PCM.f32                  named tensors: list, set, run twice, errors
 *                                                    (device buffers and streams refused on the CPU)
 */
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tether/tether.h>

#ifdef TETHER_COUNT_ALLOCS
void alloc_count_start(void);
unsigned long long alloc_count_stop(void);
#endif

static void die(const char *what, int status) {
    fprintf(stderr, "api_test: %s: %s: %s\n", what, tether_status_name(status), tether_last_error());
    exit(1);
}

#define CHECK(call)                      \
    do {                                 \
        int s_ = (call);                 \
        if (s_ != TETHER_OK) die(#call, s_); \
    } while (0)

static unsigned char *read_file(const char *path, size_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "api_test: cannot read %s\n", path);
        exit(1);
    }
    fclose(f);
    *size = (size_t)n;
    return buf;
}

/* A file of native-endian f32 samples, copied into float-aligned memory; *count samples. */
static float *read_pcm(const char *path, size_t *count) {
    size_t size = 0;
    unsigned char *raw = read_file(path, &size);
    *count = size / sizeof(float);
    float *pcm = malloc(*count * sizeof(float) + 1);
    memcpy(pcm, raw, *count * sizeof(float));
    free(raw);
    return pcm;
}

/* A JSON string (messages and class names: escape quotes, backslashes, controls). */
static void json_string(const char *s) {
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            putchar('\\');
            putchar(c);
        } else if (c < 0x20) {
            printf("\\u%04x", c);
        } else {
            putchar(c);
        }
    }
    putchar('"');
}

static void print_detections(tether_model *m, const tether_detection *d, size_t n) {
    putchar('[');
    for (size_t i = 0; i < n; i++) {
        const char *name = NULL;
        CHECK(tether_detect_class_name(m, d[i].class_id, &name));
        printf("%s{\"class_id\":%u,\"class_name\":", i ? "," : "", d[i].class_id);
        json_string(name);
        printf(",\"score\":%.9g,\"box\":[%.9g,%.9g,%.9g,%.9g]}", d[i].score, d[i].x1, d[i].y1,
               d[i].x2, d[i].y2);
    }
    putchar(']');
}

static int cmd_detect(const char *bundle, const char *frame, int w, int h) {
    size_t size = 0;
    unsigned char *rgb = read_file(frame, &size);
    if (size != (size_t)w * h * 3) {
        fprintf(stderr, "api_test: %s holds %zu bytes, not %dx%dx3\n", frame, size, w, h);
        return 1;
    }
    tether_options options;
    CHECK(tether_options_init(&options));
    tether_model *m = NULL;
    CHECK(tether_model_open(bundle, &options, &m));
    uint32_t family = 0;
    CHECK(tether_model_family(m, &family));
    if (family != TETHER_FAMILY_DETECT) {
        fprintf(stderr, "api_test: family %u\n", family);
        return 1;
    }
    tether_detection dets[300];
    size_t n = 0;
    const char *engine = NULL;
    CHECK(tether_model_engine(m, &engine));

    /* 1. A tightly packed RGB8 view. */
    tether_image_view view = {rgb, (uint32_t)w, (uint32_t)h, (size_t)w * 3, TETHER_PIXEL_RGB8};
    CHECK(tether_detect(m, &view, dets, 300, &n));
    printf("{\"engine\":\"%s\",\"rgb\":", engine);
    print_detections(m, dets, n);

    /* 2. The same pixels as BGR8 rows 40 bytes apart more than their pixels: another
     * geometry (a new session), the same detections. */
    size_t pitch = (size_t)w * 3 + 40;
    unsigned char *bgr = calloc(pitch * h, 1);
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            const unsigned char *s = rgb + ((size_t)y * w + x) * 3;
            unsigned char *d = bgr + (size_t)y * pitch + (size_t)x * 3;
            d[0] = s[2];
            d[1] = s[1];
            d[2] = s[0];
        }
    }
    tether_image_view bview = {bgr, (uint32_t)w, (uint32_t)h, pitch, TETHER_PIXEL_BGR8};
    CHECK(tether_detect(m, &bview, dets, 300, &n));
    printf(",\"bgr_pitched\":");
    print_detections(m, dets, n);

    /* 3. The staging buffer: prepare the RGB geometry, write the frame in place, run. */
    CHECK(tether_detect_prepare(m, (uint32_t)w, (uint32_t)h, (size_t)w * 3, TETHER_PIXEL_RGB8));
    tether_staging_buffer st;
    CHECK(tether_detect_staging(m, &st));
    if (st.size < (size_t)w * h * 3 || st.width != (uint32_t)w || st.height != (uint32_t)h ||
        st.format != TETHER_PIXEL_RGB8) {
        fprintf(stderr, "api_test: staging %zu bytes %ux%u format %u\n", st.size, st.width,
                st.height, st.format);
        return 1;
    }
    for (int y = 0; y < h; y++) memcpy(st.data + (size_t)y * st.pitch, rgb + (size_t)y * w * 3, (size_t)w * 3);
    CHECK(tether_detect_staged(m, dets, 300, &n));
    printf(",\"staged\":");
    print_detections(m, dets, n);
    tether_model_close(m);

    /* 4. Opened from memory (the bytes are freed right after the open). */
    size_t bsize = 0;
    unsigned char *bytes = read_file(bundle, &bsize);
    CHECK(tether_model_open_memory(bytes, bsize, NULL, &m));
    free(bytes);
    CHECK(tether_detect(m, &view, dets, 300, &n));
    printf(",\"memory\":");
    print_detections(m, dets, n);
    printf("}\n");
    tether_model_close(m);
    free(bgr);
    free(rgb);
    return 0;
}

static void print_chunks(const tether_vad_chunk *c, size_t n, int *first_p, int *first_s,
                         FILE *probs, FILE *segs) {
    for (size_t i = 0; i < n; i++) {
        fprintf(probs, "%s%.9g", *first_p ? "" : ",", c[i].probability);
        *first_p = 0;
        if (c[i].events & TETHER_VAD_SPEECH_END) {
            fprintf(segs, "%s[%llu,%llu]", *first_s ? "" : ",",
                    (unsigned long long)c[i].speech_start, (unsigned long long)c[i].speech_end);
            *first_s = 0;
        }
    }
}

/* One pass over the signal in pieces of 1000 samples (not a multiple of a chunk). */
static void vad_pass(tether_model *m, const float *pcm, size_t count, const char *key) {
    char *pbuf = NULL, *sbuf = NULL;
    size_t plen = 0, slen = 0;
    FILE *probs = open_memstream(&pbuf, &plen);
    FILE *segs = open_memstream(&sbuf, &slen);
    int first_p = 1, first_s = 1;
    tether_vad_chunk chunks[4];
    for (size_t at = 0; at < count; at += 1000) {
        size_t take = count - at < 1000 ? count - at : 1000;
        size_t written = 0;
        CHECK(tether_vad_push(m, pcm + at, take, 16000, chunks, 4, &written));
        print_chunks(chunks, written, &first_p, &first_s, probs, segs);
    }
    tether_vad_end end;
    CHECK(tether_vad_finish(m, &end));
    if (end.has_last) print_chunks(&end.last, 1, &first_p, &first_s, probs, segs);
    if (end.events & TETHER_VAD_SPEECH_END) {
        fprintf(segs, "%s[%llu,%llu]", first_s ? "" : ",", (unsigned long long)end.speech_start,
                (unsigned long long)end.speech_end);
    }
    fclose(probs);
    fclose(segs);
    printf("\"%s\":{\"probabilities\":[%s],\"segments\":[%s],\"samples\":%llu}", key, pbuf, sbuf,
           (unsigned long long)end.samples);
    free(pbuf);
    free(sbuf);
}

static int cmd_vad(const char *bundle, const char *pcm_path) {
    size_t count = 0;
    float *pcm = read_pcm(pcm_path, &count);
    tether_model *m = NULL;
    CHECK(tether_model_open(bundle, NULL, &m));
    printf("{");
    vad_pass(m, pcm, count, "first");
    /* After finish (which resets) and an explicit reset mid-stream: the same results. */
    size_t written = 0;
    tether_vad_chunk chunks[2];
    CHECK(tether_vad_push(m, pcm, 700, 16000, chunks, 2, &written));
    CHECK(tether_vad_reset(m));
    printf(",");
    vad_pass(m, pcm, count, "after_reset");
    printf("}\n");
    tether_model_close(m);
    free(pcm);
    return 0;
}

static int cmd_embed(const char *bundle, const char *texts_path) {
    size_t size = 0;
    char *text = (char *)read_file(texts_path, &size);
    tether_text texts[64];
    size_t n = 0;
    size_t start = 0;
    for (size_t i = 0; i <= size && n < 64; i++) {
        if (i == size || text[i] == '\n') {
            if (i > start) {
                texts[n].data = (const uint8_t *)text + start;
                texts[n].size = i - start;
                n++;
            }
            start = i + 1;
        }
    }
    tether_model *m = NULL;
    CHECK(tether_model_open(bundle, NULL, &m));
    size_t dim = 0;
    CHECK(tether_embed_dim(m, &dim));
    float *out = malloc(n * dim * sizeof(float));
    CHECK(tether_embed(m, texts, n, out, n * dim));
    printf("{\"dim\":%zu,\"embeddings\":[", dim);
    for (size_t i = 0; i < n; i++) {
        printf("%s[", i ? "," : "");
        for (size_t j = 0; j < dim; j++) printf("%s%.9g", j ? "," : "", out[i * dim + j]);
        printf("]");
    }
    printf("]}\n");
    tether_model_close(m);
    free(out);
    free(text);
    return 0;
}

/* One error case: its status name, the message, and extra numbers. */
static void report(const char *name, int status, long long extra) {
    printf("{\"case\":\"%s\",\"status\":\"%s\",\"extra\":%lld,\"message\":", name,
           tether_status_name(status), extra);
    json_string(tether_last_error());
    printf("}\n");
}

/* An error as a JSON member of the enclosing object. */
static void report_inline(const char *name, int status) {
    printf(",\"%s\":{\"status\":\"%s\",\"message\":", name, tether_status_name(status));
    json_string(tether_last_error());
    printf("}");
}

static int cmd_errors(const char *detect, const char *vad, const char *embed, const char *truncated,
                      const char *junk, const char *llm) {
    tether_model *m = (tether_model *)(uintptr_t)1; /* open must reset it to null */
    int s;

    s = tether_model_open("/nonexistent/dir/missing.bundle", NULL, &m);
    report("open_missing", s, m == NULL);
    s = tether_model_open(truncated, NULL, &m);
    report("open_truncated", s, m == NULL);
    s = tether_model_open(junk, NULL, &m);
    report("open_not_a_bundle", s, m == NULL);
    size_t tsize = 0;
    unsigned char *tbytes = read_file(truncated, &tsize);
    s = tether_model_open_memory(tbytes, tsize, NULL, &m);
    report("open_memory_truncated", s, m == NULL);
    free(tbytes);
    s = tether_model_open(NULL, NULL, &m);
    report("open_null_path", s, m == NULL);
    s = tether_model_open(detect, NULL, NULL);
    report("open_null_out", s, 0);
    s = tether_model_open_memory(NULL, 10, NULL, &m);
    report("open_memory_null", s, 0);

    tether_options options;
    CHECK(tether_options_init(&options));
    options.struct_size = 8;
    s = tether_model_open(detect, &options, &m);
    report("options_small_struct", s, 0);
    CHECK(tether_options_init(&options));
    options.struct_size = 4096;
    s = tether_model_open(detect, &options, &m);
    report("options_large_struct", s, m == NULL);
    CHECK(tether_options_init(&options));
    options.device = 7;
    s = tether_model_open(detect, &options, &m);
    report("options_bad_device", s, 0);
    s = tether_options_init(NULL);
    report("options_init_null", s, 0);
    /* A thread count beyond the library's bound is refused before any thread starts; one
     * beyond the cores (but within the bound) is lowered to them: the open returns. */
    CHECK(tether_options_init(&options));
    options.threads = 100000;
    s = tether_model_open(detect, &options, &m);
    report("options_threads_huge", s, m == NULL);
    CHECK(tether_options_init(&options));
    options.threads = 1000;
    s = tether_model_open(detect, &options, &m);
    report("options_threads_beyond_cores", s, m != NULL);
    tether_model_close(m);
    m = NULL;
    {
        tether_generator_options gopt;
        CHECK(tether_generator_options_init(&gopt));
        gopt.threads = 100000;
        tether_generator *gh = (tether_generator *)(uintptr_t)1;
        s = tether_generator_open(llm, &gopt, &gh);
        report("generator_threads_huge", s, gh == NULL);
    }

    /* The named-tensor API on a bundle whose network has dynamic input dimensions: refused
     * as unsupported (its family call runs it); an unknown name lists the bundle's. */
    {
        tether_network *nh = (tether_network *)(uintptr_t)1;
        s = tether_network_open(embed, "encoder", NULL, &nh);
        report("network_open_dynamic", s, nh == NULL);
        s = tether_network_open(embed, "zzz", NULL, &nh);
        report("network_open_unknown", s, nh == NULL);
    }

    /* Each handle's family: an llm bundle is not a model, a detect bundle not a generator. */
    s = tether_model_open(llm, NULL, &m);
    report("model_open_llm", s, m == NULL);
    tether_generator *g = (tether_generator *)(uintptr_t)1;
    s = tether_generator_open(detect, NULL, &g);
    report("generator_open_detect", s, g == NULL);

    tether_model *det = NULL, *vm = NULL, *em = NULL;
    CHECK(tether_model_open(detect, NULL, &det));
    CHECK(tether_model_open(vad, NULL, &vm));
    CHECK(tether_model_open(embed, NULL, &em));

    /* Wrong family, each way. */
    tether_detection dets[300];
    size_t n = 0;
    unsigned char px[64 * 48 * 3];
    for (size_t i = 0; i < sizeof px; i++) px[i] = (unsigned char)(i * 7);
    tether_image_view view = {px, 64, 48, 64 * 3, TETHER_PIXEL_RGB8};
    s = tether_detect(vm, &view, dets, 300, &n);
    report("detect_on_vad", s, 0);
    float pcm[512] = {0};
    tether_vad_chunk chunks[2];
    s = tether_vad_push(det, pcm, 512, 16000, chunks, 2, &n);
    report("vad_on_detect", s, 0);
    tether_text text = {(const uint8_t *)"hello", 5};
    float emb[384];
    s = tether_embed(det, &text, 1, emb, 384);
    report("embed_on_detect", s, 0);

    /* Null and bad arguments. */
    s = tether_detect(NULL, &view, dets, 300, &n);
    report("detect_null_model", s, 0);
    s = tether_detect(det, NULL, dets, 300, &n);
    report("detect_null_image", s, 0);
    s = tether_detect(det, &view, dets, 300, NULL);
    report("detect_null_count", s, 0);
    s = tether_detect(det, &view, NULL, 300, &n);
    report("detect_null_array", s, 0);
    tether_image_view bad = view;
    bad.pitch = 10;
    s = tether_detect(det, &bad, dets, 300, &n);
    report("detect_small_pitch", s, 0);
    bad = view;
    bad.format = 99;
    s = tether_detect(det, &bad, dets, 300, &n);
    report("detect_bad_format", s, 0);
    bad = view;
    bad.width = 0;
    s = tether_detect(det, &bad, dets, 300, &n);
    report("detect_zero_width", s, 0);
    bad = view;
    bad.data = NULL;
    s = tether_detect(det, &bad, dets, 300, &n);
    report("detect_null_data", s, 0);
    tether_staging_buffer st;
    s = tether_detect_staging(det, &st);
    report("staging_before_prepare", s, 0);
    s = tether_detect_staged(det, dets, 300, &n);
    report("staged_before_prepare", s, 0);
    /* A pitch whose staging would not fit: refused, and the model stays usable. */
    s = tether_detect_prepare(det, 10, 10, (size_t)1 << 40, TETHER_PIXEL_RGB8);
    report("prepare_huge_pitch", s, 0);
    s = tether_detect_prepare(det, 10, 10, SIZE_MAX, TETHER_PIXEL_RGB8);
    report("prepare_overflowing_pitch", s, 0);
    CHECK(tether_detect_prepare(det, 10, 10, 30, TETHER_PIXEL_RGB8));
    const char *name = NULL;
    s = tether_detect_class_name(det, 100000, &name);
    report("class_name_out_of_range", s, 0);

    /* A result array too small: a synthetic frame with many detections is not needed; the
     * test frame (given as the truncated bundle's sibling) is run by the `detect` command.
     * Here: capacity 0 asks for the count of the synthetic frame's detections. */
    s = tether_detect(det, &view, NULL, 0, &n);
    report("detect_count_query", s, (long long)n);

    s = tether_vad_push(vm, pcm, 512, 48000, chunks, 2, &n);
    report("vad_bad_rate", s, 0);
    float many[2048] = {0};
    n = 12345;
    s = tether_vad_push(vm, many, 2048, 16000, chunks, 2, &n);
    report("vad_small_array", s, (long long)n);
    s = tether_vad_push(vm, NULL, 10, 16000, chunks, 2, &n);
    report("vad_null_samples", s, 0);
    /* NaN and infinite samples: refused, naming the sample's index in the stream (600 + 5,
     * 600 + 7) and its value; nothing is consumed, so 424 more samples complete chunk 1. */
    CHECK(tether_vad_reset(vm));
    float fine[600] = {0};
    CHECK(tether_vad_push(vm, fine, 600, 16000, chunks, 2, &n));
    float odd[10] = {0};
    odd[5] = NAN;
    n = 12345;
    s = tether_vad_push(vm, odd, 10, 16000, chunks, 2, &n);
    report("vad_nan_sample", s, (long long)n);
    odd[5] = 0.0f;
    odd[7] = -INFINITY;
    s = tether_vad_push(vm, odd, 10, 16000, chunks, 2, &n);
    report("vad_inf_sample", s, (long long)n);
    CHECK(tether_vad_push(vm, fine, 424, 16000, chunks, 2, &n));
    report("vad_after_refusal", TETHER_OK, n == 1 ? (long long)chunks[0].index : -1);
    /* A count no buffer can hold, with samples pending: refused before anything is read
     * (the pending count plus it would wrap past the capacity check). */
    CHECK(tether_vad_push(vm, fine, 100, 16000, chunks, 2, &n));
    s = tether_vad_push(vm, fine, SIZE_MAX - 50, 16000, chunks, 2, &n);
    report("vad_count_huge", s, 0);

    tether_text texts[2] = {{(const uint8_t *)"fine", 4}, {(const uint8_t *)"bad \xff\xfe", 6}};
    float emb2[2 * 384];
    s = tether_embed(em, texts, 2, emb2, 2 * 384);
    report("embed_not_utf8", s, 0);
    s = tether_embed(em, texts, 1, emb2, 100);
    report("embed_small_array", s, 0);
    s = tether_embed_dim(em, NULL);
    report("embed_dim_null", s, 0);

    /* The copy variant of the last error. */
    char small[8];
    size_t needed = 0;
    s = tether_last_error_copy(small, sizeof small, &needed);
    printf("{\"case\":\"last_error_copy\",\"status\":\"%s\",\"extra\":%zu,\"message\":", tether_status_name(s), needed);
    json_string(small);
    printf("}\n");

    tether_model_close(NULL);
    tether_model_close(det);
    tether_model_close(vm);
    tether_model_close(em);
    return 0;
}

/* A result array one element too small on a real frame. */
static int cmd_detect_small(const char *bundle, const char *frame, int w, int h) {
    size_t size = 0;
    unsigned char *rgb = read_file(frame, &size);
    tether_model *m = NULL;
    CHECK(tether_model_open(bundle, NULL, &m));
    tether_detection all[300], some[300];
    size_t n = 0, count = 0;
    tether_image_view view = {rgb, (uint32_t)w, (uint32_t)h, (size_t)w * 3, TETHER_PIXEL_RGB8};
    CHECK(tether_detect(m, &view, all, 300, &n));
    if (n == 0) {
        fprintf(stderr, "api_test: no detection to make an array too small for\n");
        return 1;
    }
    int s = tether_detect(m, &view, some, n - 1, &count);
    printf("{\"all\":");
    print_detections(m, all, n);
    printf(",\"written\":");
    print_detections(m, some, count < n - 1 ? count : n - 1);
    printf(",\"count\":%zu,\"status\":\"%s\",\"message\":", count, tether_status_name(s));
    json_string(tether_last_error());
    printf("}\n");
    tether_model_close(m);
    free(rgb);
    return 0;
}

/* The streamed pieces, gathered by the callback. */
struct stream {
    char text[65536];
    size_t size;
    long long tokens[4096];
    size_t n_tokens;
    size_t stop_after; /* 0: never stop */
    atomic_int seen;
};

static int32_t on_piece(void *user, const char *text, size_t size, int32_t token) {
    struct stream *s = user;
    if (s->size + size < sizeof s->text) {
        memcpy(s->text + s->size, text, size);
        s->size += size;
    }
    if (token >= 0 && s->n_tokens < 4096) s->tokens[s->n_tokens++] = token;
    atomic_fetch_add(&s->seen, 1);
    return s->stop_after && s->n_tokens >= s->stop_after;
}

static void print_stream(const struct stream *s) {
    printf("\"text\":");
    char *t = malloc(s->size + 1);
    memcpy(t, s->text, s->size);
    t[s->size] = 0;
    json_string(t);
    free(t);
    printf(",\"tokens\":[");
    for (size_t i = 0; i < s->n_tokens; i++) printf("%s%lld", i ? "," : "", s->tokens[i]);
    printf("]");
}

static int cmd_generate(const char *bundle, const char *prompt, int max_tokens) {
    tether_generator_options options;
    CHECK(tether_generator_options_init(&options));
    options.threads = 1;
    tether_generator *g = NULL;
    CHECK(tether_generator_open(bundle, &options, &g));
    tether_generate_params params;
    CHECK(tether_generate_params_init(g, &params));
    params.temperature = 0.0f;
    params.max_tokens = (uint32_t)max_tokens;
    struct stream *s = calloc(1, sizeof *s);
    tether_generate_result r;
    CHECK(tether_generate(g, (const uint8_t *)prompt, strlen(prompt), &params, on_piece, s, &r));
    printf("{");
    print_stream(s);
    printf(",\"finish_reason\":%u,\"prompt_tokens\":%u,\"generated_tokens\":%u}\n", r.finish_reason,
           r.prompt_tokens, r.generated_tokens);
    free(s);
    tether_generator_close(g);
    return 0;
}

struct canceller {
    tether_generator *g;
    struct stream *s;
};

static void *cancel_when_streaming(void *arg) {
    struct canceller *c = arg;
    while (atomic_load(&c->s->seen) < 2) {
    }
    tether_generator_cancel(c->g);
    return NULL;
}

static int cmd_generate_cancel(const char *bundle, const char *prompt) {
    tether_generator *g = NULL;
    tether_generator_options options;
    CHECK(tether_generator_options_init(&options));
    options.threads = 1;
    CHECK(tether_generator_open(bundle, &options, &g));
    tether_generate_params params;
    CHECK(tether_generate_params_init(g, &params));
    params.temperature = 0.0f;
    params.max_tokens = 200;

    /* 1. The callback asks to stop after 3 tokens. */
    struct stream *s = calloc(1, sizeof *s);
    s->stop_after = 3;
    tether_generate_result r;
    int st = tether_generate(g, (const uint8_t *)prompt, strlen(prompt), &params, on_piece, s, &r);
    printf("{\"callback\":{\"status\":\"%s\",\"finish_reason\":%u,\"generated_tokens\":%u,\"message\":",
           tether_status_name(st), r.finish_reason, r.generated_tokens);
    json_string(tether_last_error());
    printf(",");
    print_stream(s);
    printf("}");

    /* 2. Another thread cancels once pieces flow. */
    memset(s, 0, sizeof *s);
    struct canceller c = {g, s};
    pthread_t t;
    pthread_create(&t, NULL, cancel_when_streaming, &c);
    st = tether_generate(g, (const uint8_t *)prompt, strlen(prompt), &params, on_piece, s, &r);
    pthread_join(t, NULL);
    printf(",\"thread\":{\"status\":\"%s\",\"finish_reason\":%u,\"generated_tokens\":%u}",
           tether_status_name(st), r.finish_reason, r.generated_tokens);

    /* 3. The next request runs to its end (the cancel flag is reset). */
    params.max_tokens = 4;
    memset(s, 0, sizeof *s);
    st = tether_generate(g, (const uint8_t *)prompt, strlen(prompt), &params, on_piece, s, &r);
    printf(",\"after\":{\"status\":\"%s\",\"generated_tokens\":%u}", tether_status_name(st), r.generated_tokens);

    /* 4. Errors: a prompt that is not UTF-8, max_tokens 0, a missing file, null. */
    st = tether_generate(g, (const uint8_t *)"\xff", 1, &params, NULL, NULL, NULL);
    report_inline("not_utf8", st);
    /* An empty or blank prompt, in chat mode (the default) and raw. */
    st = tether_generate(g, (const uint8_t *)"", 0, &params, NULL, NULL, NULL);
    report_inline("empty_chat", st);
    st = tether_generate(g, (const uint8_t *)" \n\t", 3, &params, NULL, NULL, NULL);
    report_inline("blank_chat", st);
    params.raw = 1;
    st = tether_generate(g, (const uint8_t *)"   ", 3, &params, NULL, NULL, NULL);
    report_inline("blank_raw", st);
    params.raw = 0;
    params.max_tokens = 0;
    st = tether_generate(g, (const uint8_t *)prompt, strlen(prompt), &params, NULL, NULL, NULL);
    report_inline("zero_max_tokens", st);
    tether_generator *missing = (tether_generator *)(uintptr_t)1;
    st = tether_generator_open("/nonexistent/model.gguf", NULL, &missing);
    report_inline("open_missing", st);
    st = tether_generator_cancel(NULL);
    report_inline("cancel_null", st);
    printf("}\n");
    free(s);
    tether_generator_close(g);
    tether_generator_close(NULL);
    return 0;
}

#ifdef TETHER_COUNT_ALLOCS
static int cmd_alloc(const char *bundle, const char *frame, int w, int h) {
    size_t size = 0;
    unsigned char *rgb = read_file(frame, &size);
    tether_model *m = NULL;
    CHECK(tether_model_open(bundle, NULL, &m));
    tether_detection dets[300];
    size_t n = 0;
    tether_image_view view = {rgb, (uint32_t)w, (uint32_t)h, (size_t)w * 3, TETHER_PIXEL_RGB8};
    CHECK(tether_detect_prepare(m, (uint32_t)w, (uint32_t)h, (size_t)w * 3, TETHER_PIXEL_RGB8));
    tether_staging_buffer st;
    CHECK(tether_detect_staging(m, &st));
    memcpy(st.data, rgb, (size_t)w * h * 3);
    for (int i = 0; i < 5; i++) {
        CHECK(tether_detect(m, &view, dets, 300, &n));
        CHECK(tether_detect_staged(m, dets, 300, &n));
    }
    printf("{\"detect\":[");
    for (int i = 0; i < 20; i++) {
        alloc_count_start();
        int s = tether_detect(m, &view, dets, 300, &n);
        unsigned long long c = alloc_count_stop();
        if (s != TETHER_OK) die("tether_detect", s);
        printf("%s%llu", i ? "," : "", c);
    }
    printf("],\"staged\":[");
    for (int i = 0; i < 20; i++) {
        alloc_count_start();
        int s = tether_detect_staged(m, dets, 300, &n);
        unsigned long long c = alloc_count_stop();
        if (s != TETHER_OK) die("tether_detect_staged", s);
        printf("%s%llu", i ? "," : "", c);
    }
    const char *engine = NULL;
    CHECK(tether_model_engine(m, &engine));
    printf("],\"detections\":%zu,\"engine\":\"%s\"}\n", n, engine);
    tether_model_close(m);
    free(rgb);
    return 0;
}

/* Allocations per tether_ocr call on a page and per tether_network_run of the VAD network,
 * after warm-up. */
static int cmd_alloc_more(const char *ocr, const char *page, int w, int h, const char *vad, const char *pcm_path) {
    size_t size = 0;
    unsigned char *gray = read_file(page, &size);
    tether_model *m = NULL;
    CHECK(tether_model_open(ocr, NULL, &m));
    tether_image_view view = {gray, (uint32_t)w, (uint32_t)h, (size_t)w, TETHER_PIXEL_GRAY8};
    tether_ocr_line lines[64];
    char text[8192];
    size_t n = 0, bytes = 0;
    for (int i = 0; i < 2; i++) CHECK(tether_ocr(m, &view, lines, 64, &n, text, sizeof text, &bytes));
    printf("{\"ocr\":[");
    for (int i = 0; i < 5; i++) {
        alloc_count_start();
        int s = tether_ocr(m, &view, lines, 64, &n, text, sizeof text, &bytes);
        unsigned long long c = alloc_count_stop();
        if (s != TETHER_OK) die("tether_ocr", s);
        printf("%s%llu", i ? "," : "", c);
    }
    tether_model_close(m);
    free(gray);
    size_t count = 0;
    float *pcm = read_pcm(pcm_path, &count);
    tether_network *net = NULL;
    CHECK(tether_network_open(vad, NULL, NULL, &net));
    int64_t sr = 16000;
    CHECK(tether_network_set_input(net, "sr", &sr, sizeof sr));
    CHECK(tether_network_set_input(net, "input", pcm, 576 * sizeof(float)));
    for (int i = 0; i < 5; i++) CHECK(tether_network_run(net));
    printf("],\"network_run\":[");
    for (int i = 0; i < 20; i++) {
        alloc_count_start();
        int s = tether_network_run(net);
        unsigned long long c = alloc_count_stop();
        if (s != TETHER_OK) die("tether_network_run", s);
        printf("%s%llu", i ? "," : "", c);
    }
    printf("]}\n");
    tether_network_close(net);
    free(pcm);
    return 0;
}

/* Allocations per tether_vad_push of one 512-sample chunk, after warm-up. */
static int cmd_alloc_vad(const char *bundle, const char *pcm_path) {
    size_t count = 0;
    float *pcm = read_pcm(pcm_path, &count);
    tether_model *m = NULL;
    CHECK(tether_model_open(bundle, NULL, &m));
    tether_vad_chunk chunk;
    size_t written = 0, chunks = count / 512;
    for (size_t i = 0; i < 20; i++) CHECK(tether_vad_push(m, pcm + (i % chunks) * 512, 512, 16000, &chunk, 1, &written));
    printf("{\"push\":[");
    for (size_t i = 0; i < 40; i++) {
        alloc_count_start();
        int s = tether_vad_push(m, pcm + ((20 + i) % chunks) * 512, 512, 16000, &chunk, 1, &written);
        unsigned long long c = alloc_count_stop();
        if (s != TETHER_OK || written != 1) die("tether_vad_push", s);
        printf("%s%llu", i ? "," : "", c);
    }
    printf("]}\n");
    tether_model_close(m);
    free(pcm);
    return 0;
}
#endif

static void print_ocr_lines(const tether_ocr_line *l, size_t n, const char *text) {
    putchar('[');
    for (size_t i = 0; i < n; i++) {
        printf("%s{\"text\":", i ? "," : "");
        json_string(text + l[i].text_offset);
        printf(",\"text_size\":%zu,\"score\":%.9g,\"box_score\":%.9g,\"rotated\":%s,\"polygon\":[", l[i].text_size,
               l[i].score, l[i].box_score, l[i].rotated ? "true" : "false");
        for (int k = 0; k < 4; k++) printf("%s[%.9g,%.9g]", k ? "," : "", l[i].quad[2 * k], l[i].quad[2 * k + 1]);
        printf("]}");
    }
    putchar(']');
}

/* One OCR error case: status, message and the two counts. */
static void ocr_case(const char *name, int status, size_t lines, size_t bytes) {
    printf(",\"%s\":{\"status\":\"%s\",\"lines\":%zu,\"bytes\":%zu,\"message\":", name, tether_status_name(status),
           lines, bytes);
    json_string(status == TETHER_OK ? "" : tether_last_error());
    putchar('}');
}

/* Text lines of a grayscale frame, the size query, too-small arrays, and the errors. */
static int cmd_ocr(const char *bundle, const char *frame, int w, int h, const char *detect) {
    size_t size = 0;
    unsigned char *gray = read_file(frame, &size);
    tether_model *m = NULL;
    CHECK(tether_model_open(bundle, NULL, &m));
    uint32_t family = 0;
    CHECK(tether_model_family(m, &family));
    const char *engine = NULL;
    CHECK(tether_model_engine(m, &engine));
    tether_image_view view = {gray, (uint32_t)w, (uint32_t)h, (size_t)w, TETHER_PIXEL_GRAY8};

    /* The size query, then arrays of exactly the sizes it gave. */
    size_t n = 0, bytes = 0;
    int s = tether_ocr(m, &view, NULL, 0, &n, NULL, 0, &bytes);
    if (n == 0) {
        fprintf(stderr, "api_test: no text line found\n");
        return 1;
    }
    size_t qn = n, qbytes = bytes;
    int query_status = s;
    tether_ocr_line *lines = calloc(n, sizeof *lines);
    char *text = malloc(bytes);
    CHECK(tether_ocr(m, &view, lines, n, &n, text, bytes, &bytes));
    printf("{\"family\":%u,\"engine\":\"%s\",\"lines\":", family, engine);
    print_ocr_lines(lines, n, text);
    printf(",\"line_count\":%zu,\"text_size\":%zu", n, bytes);
    ocr_case("size_query", query_status, qn, qbytes);

    /* Too small: one line short, one byte short (counts written, nothing else). */
    size_t cn = 0, cb = 0;
    s = tether_ocr(m, &view, lines, n - 1, &cn, text, bytes, &cb);
    ocr_case("lines_short", s, cn, cb);
    cn = cb = 0;
    s = tether_ocr(m, &view, lines, n, &cn, text, bytes - 1, &cb);
    ocr_case("text_short", s, cn, cb);

    /* Null and bad arguments. */
    s = tether_ocr(NULL, &view, lines, n, &cn, text, bytes, &cb);
    ocr_case("null_model", s, 0, 0);
    s = tether_ocr(m, NULL, lines, n, &cn, text, bytes, &cb);
    ocr_case("null_image", s, 0, 0);
    s = tether_ocr(m, &view, NULL, n, &cn, text, bytes, &cb);
    ocr_case("null_lines", s, 0, 0);
    s = tether_ocr(m, &view, lines, n, &cn, NULL, bytes, &cb);
    ocr_case("null_text", s, 0, 0);
    s = tether_ocr(m, &view, lines, n, NULL, text, bytes, &cb);
    ocr_case("null_line_count", s, 0, 0);
    s = tether_ocr(m, &view, lines, n, &cn, text, bytes, NULL);
    ocr_case("null_text_size", s, 0, 0);
    tether_image_view bad = view;
    bad.pitch = 3;
    s = tether_ocr(m, &bad, lines, n, &cn, text, bytes, &cb);
    ocr_case("small_pitch", s, 0, 0);

    /* Wrong family, both ways. */
    tether_model *det = NULL;
    CHECK(tether_model_open(detect, NULL, &det));
    s = tether_ocr(det, &view, lines, n, &cn, text, bytes, &cb);
    ocr_case("ocr_on_detect", s, 0, 0);
    tether_detection dets[8];
    s = tether_detect(m, &view, dets, 8, &cn);
    ocr_case("detect_on_ocr", s, 0, 0);

    /* The model still reads after the errors. */
    CHECK(tether_ocr(m, &view, lines, n, &n, text, bytes, &bytes));
    printf(",\"again\":");
    print_ocr_lines(lines, n, text);
    printf("}\n");
    tether_model_close(det);
    tether_model_close(m);
    free(lines);
    free(text);
    free(gray);
    return 0;
}

static void print_floats(const float *v, size_t n) {
    putchar('[');
    for (size_t i = 0; i < n; i++) printf("%s%.9g", i ? "," : "", v[i]);
    putchar(']');
}

static void print_tensors(tether_network *net, uint32_t io) {
    size_t count = 0;
    CHECK(tether_network_tensor_count(net, io, &count));
    putchar('[');
    for (size_t i = 0; i < count; i++) {
        tether_tensor_info t;
        CHECK(tether_network_tensor(net, io, i, &t));
        printf("%s{\"name\":", i ? "," : "");
        json_string(t.name);
        printf(",\"dtype\":%u,\"size\":%zu,\"shape\":[", t.dtype, t.size);
        for (uint32_t d = 0; d < t.rank; d++) printf("%s%llu", d ? "," : "", (unsigned long long)t.shape[d]);
        printf("]}");
    }
    putchar(']');
}

/* A network error case: its status and message. */
static void net_case(const char *name, int status) {
    printf(",\"%s\":{\"status\":\"%s\",\"message\":", name, tether_status_name(status));
    json_string(status == TETHER_OK ? "" : tether_last_error());
    putchar('}');
}

/* The VAD bundle's network through the named-tensor API: PCM samples as `input` (copied
 * in), a fixed pattern as `state` (written in place), 16000 as `sr` when it is an input;
 * run, then run again with `stateN` fed back (copied out) as `state`. */
static int cmd_network(const char *bundle, const char *pcm_path) {
    size_t count = 0;
    float *pcm = read_pcm(pcm_path, &count);
    tether_network *net = NULL;
    CHECK(tether_network_open(bundle, NULL, NULL, &net));
    const char *engine = NULL;
    CHECK(tether_network_engine(net, &engine));
    printf("{\"engine\":\"%s\",\"inputs\":", engine);
    print_tensors(net, TETHER_IO_INPUT);
    printf(",\"outputs\":");
    print_tensors(net, TETHER_IO_OUTPUT);

    size_t n_in = 0;
    CHECK(tether_network_tensor_count(net, TETHER_IO_INPUT, &n_in));
    for (size_t i = 0; i < n_in; i++) {
        tether_tensor_info t;
        CHECK(tether_network_tensor(net, TETHER_IO_INPUT, i, &t));
        if (strcmp(t.name, "sr") == 0) {
            int64_t sr = 16000;
            CHECK(tether_network_set_input(net, "sr", &sr, sizeof sr));
        }
    }
    tether_tensor_info in;
    CHECK(tether_network_tensor(net, TETHER_IO_INPUT, 0, &in));
    size_t samples = 576;
    if (count < samples) {
        fprintf(stderr, "api_test: %s holds %zu samples, fewer than %zu\n", pcm_path, count, samples);
        return 1;
    }
    CHECK(tether_network_set_input(net, "input", pcm, samples * sizeof(float)));
    void *state = NULL;
    size_t state_size = 0;
    CHECK(tether_network_input(net, "state", &state, &state_size));
    float *st = state;
    for (size_t i = 0; i < state_size / sizeof(float); i++) st[i] = ((float)(i % 17) - 8.0f) * 0.01f;
    CHECK(tether_network_run(net));
    const void *out = NULL;
    size_t out_size = 0;
    CHECK(tether_network_output(net, "output", &out, &out_size));
    printf(",\"run1\":{\"output\":");
    print_floats(out, out_size / sizeof(float));
    float state_n[256];
    size_t sn = 0;
    CHECK(tether_network_copy_output(net, "stateN", state_n, sizeof state_n, &sn));
    printf(",\"stateN\":");
    print_floats(state_n, sn / sizeof(float));
    /* Recurrence: the new state in, the same samples again. */
    CHECK(tether_network_set_input(net, "state", state_n, sn));
    CHECK(tether_network_run(net));
    CHECK(tether_network_output(net, "output", &out, &out_size));
    printf("},\"run2\":{\"output\":");
    print_floats(out, out_size / sizeof(float));
    CHECK(tether_network_copy_output(net, "stateN", state_n, sizeof state_n, &sn));
    printf(",\"stateN\":");
    print_floats(state_n, sn / sizeof(float));
    putchar('}');

    /* Errors. */
    tether_network *bad = (tether_network *)(uintptr_t)1;
    int s = tether_network_open("/nonexistent/net.bundle", NULL, NULL, &bad);
    net_case("open_missing", s);
    printf(",\"open_missing_null\":%s", bad == NULL ? "true" : "false");
    s = tether_network_open(bundle, "nope", NULL, &bad);
    net_case("open_no_such_network", s);
    s = tether_network_open(NULL, NULL, NULL, &bad);
    net_case("open_null_path", s);
    s = tether_network_set_input(net, "nope", pcm, 4);
    net_case("set_unknown", s);
    s = tether_network_set_input(net, "input", pcm, 100);
    net_case("set_wrong_size", s);
    s = tether_network_set_input(net, "input", NULL, 4);
    net_case("set_null_data", s);
    s = tether_network_set_input(net, NULL, pcm, 4);
    net_case("set_null_name", s);
    s = tether_network_output(net, "nope", &out, &out_size);
    net_case("output_unknown", s);
    s = tether_network_output(net, "input", &out, &out_size);
    net_case("output_is_input", s);
    sn = 0;
    s = tether_network_copy_output(net, "stateN", state_n, 16, &sn);
    net_case("copy_small", s);
    printf(",\"copy_small_size\":%zu", sn);
    s = tether_network_tensor(net, TETHER_IO_OUTPUT, 99, &in);
    net_case("tensor_out_of_range", s);
    s = tether_network_tensor_count(net, 7, &sn);
    net_case("bad_io", s);
    s = tether_network_run(NULL);
    net_case("run_null", s);
    /* Device buffers and a caller's stream: refused on the CPU, nothing written. */
    uint64_t address = 0xdead;
    size_t device_size = 7;
    s = tether_network_device_buffer(net, TETHER_IO_INPUT, "input", &address, &device_size);
    net_case("device_buffer_cpu", s);
    printf(",\"device_buffer_untouched\":%s", address == 0xdead && device_size == 7 ? "true" : "false");
    s = tether_network_device_buffer(net, TETHER_IO_OUTPUT, "stateN", &address, &device_size);
    net_case("device_buffer_output_cpu", s);
    s = tether_network_device_buffer(net, TETHER_IO_OUTPUT, "nope", &address, &device_size);
    net_case("device_buffer_unknown", s);
    s = tether_network_device_buffer(net, 7, "input", &address, &device_size);
    net_case("device_buffer_bad_io", s);
    s = tether_network_device_buffer(net, TETHER_IO_INPUT, "input", NULL, &device_size);
    net_case("device_buffer_null_address", s);
    s = tether_network_run_on_stream(net, NULL, TETHER_MEMORY_DEVICE);
    net_case("run_on_stream_cpu", s);
    s = tether_network_run_on_stream(net, NULL, TETHER_MEMORY_HOST);
    net_case("run_on_stream_host_cpu", s);
    s = tether_network_run_on_stream(net, NULL, 9);
    net_case("run_on_stream_bad_memory", s);
    s = tether_network_run_on_stream(NULL, NULL, TETHER_MEMORY_DEVICE);
    net_case("run_on_stream_null", s);
    printf("}\n");
    tether_network_close(NULL);
    tether_network_close(net);
    free(pcm);
    return 0;
}

int main(int argc, char **argv) {
    if (tether_abi_version() != TETHER_ABI_VERSION) {
        fprintf(stderr, "api_test: header ABI %d, library %u\n", TETHER_ABI_VERSION, tether_abi_version());
        return 1;
    }
    if (argc == 6 && strcmp(argv[1], "detect") == 0) return cmd_detect(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    if (argc == 6 && strcmp(argv[1], "detect_small") == 0) return cmd_detect_small(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    if (argc == 5 && strcmp(argv[1], "generate") == 0) return cmd_generate(argv[2], argv[3], atoi(argv[4]));
    if (argc == 4 && strcmp(argv[1], "generate_cancel") == 0) return cmd_generate_cancel(argv[2], argv[3]);
    if (argc == 7 && strcmp(argv[1], "ocr") == 0) return cmd_ocr(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), argv[6]);
    if (argc == 4 && strcmp(argv[1], "vad") == 0) return cmd_vad(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "network") == 0) return cmd_network(argv[2], argv[3]);
    if (argc == 4 && strcmp(argv[1], "embed") == 0) return cmd_embed(argv[2], argv[3]);
    if (argc == 8 && strcmp(argv[1], "errors") == 0)
        return cmd_errors(argv[2], argv[3], argv[4], argv[5], argv[6], argv[7]);
#ifdef TETHER_COUNT_ALLOCS
    if (argc == 6 && strcmp(argv[1], "alloc") == 0) return cmd_alloc(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]));
    if (argc == 4 && strcmp(argv[1], "alloc_vad") == 0) return cmd_alloc_vad(argv[2], argv[3]);
    if (argc == 8 && strcmp(argv[1], "alloc_more") == 0)
        return cmd_alloc_more(argv[2], argv[3], atoi(argv[4]), atoi(argv[5]), argv[6], argv[7]);
#endif
    fprintf(stderr, "usage: api_test detect|ocr|vad|network|embed|errors|alloc ... (tether %s)\n", tether_version());
    return 2;
}
