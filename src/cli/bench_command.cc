// `weightcast bench delta`: the codec's size and speed on a synthetic Adam-bf16 update.
#include <cstdio>
#include <memory>

#include "bench/drivers/adapter_benchmark.h"
#include "bench/drivers/coalesce_benchmark.h"
#include "bench/drivers/delta_benchmark.h"
#include "bench/drivers/journal_benchmark.h"
#include "bench/drivers/model_delta_benchmark.h"
#include "bench/drivers/ranks_benchmark.h"
#include "codec/delta_format.h"
#include "src/cli/commands.h"
#include "src/cli/number_flags.h"
#include "weightcast/config.h"
#if WEIGHTCAST_HAVE_UCX
#include "bench/drivers/ucx_benchmark.h"
#endif

namespace weightcast::cli {

#if WEIGHTCAST_HAVE_UCX
namespace {

// `bench ucx`: only in builds with the UCX backend.
void register_bench_ucx(CLI::App& bench, int& exit_code) {
  auto cfg = std::make_shared<UcxBenchmarkConfig>();
  auto json = std::make_shared<bool>(false);
  auto* u = bench.add_subcommand(
      "ucx",
      "Part-fetch bandwidth of the UCX backend (a subscriber reading a part published by a "
      "forked publisher) against ucx_perftest -t ucp_get, same UCX_TLS and size, on loopback "
      "or, with --publisher-netns, across a link to another network namespace");
  u->add_option("--tls", cfg->tls, "UCX_TLS values to measure, comma-separated")
      ->delimiter(',')
      ->capture_default_str();
  u->add_option("--sizes", cfg->part_bytes, "Part sizes in bytes, comma-separated")
      ->delimiter(',')
      ->capture_default_str()
      ->check(number_in<uint64_t>(1, kMaxBenchPartBytes));
  u->add_option("--iterations", cfg->iterations,
                "Timed fetches (and perftest iterations) per run; 0: ~1 GiB per run")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxBenchIterations));
  u->add_option("--repetitions", cfg->repetitions,
                "Interleaved runs of each side per case (best is kept)")
      ->capture_default_str()
      ->check(number_in<int>(1, kMaxRepetitions));
  u->add_option("--perftest", cfg->perftest,
                "Path of ucx_perftest (default: found on PATH; package ucx-utils)");
  u->add_option("--chunk-bytes", cfg->chunk_bytes,
                "Subscriber bytes per ucp_get_nbx (0: the transport's default)")
      ->capture_default_str()
      ->check(number_in<size_t>(0, kMaxBenchChunkBytes));
  u->add_option("--max-in-flight", cfg->max_in_flight,
                "Subscriber gets outstanding at once (0: the transport's default)")
      ->capture_default_str()
      ->check(number_in<size_t>(0, kMaxBenchGetsInFlight));
  u->add_option("--mapped-chunk-bytes", cfg->mapped_chunk_bytes,
                "Subscriber bytes per copy where the part is mapped into it, each hashed in the "
                "same pass as it is copied (0: the transport's default)")
      ->capture_default_str()
      ->check(number_in<size_t>(0, kMaxBenchChunkBytes));
  u->add_option("--publisher-memory", cfg->publisher_memory,
                "Where the publisher serves parts from, comma-separated: in_place (its own "
                "buffers, zero copy) and/or copy (copies in a shared-memory segment, which a "
                "subscriber on the same host maps)")
      ->delimiter(',')
      ->check(CLI::IsMember({"copy", "in_place"}))
      ->capture_default_str();
  u->add_option("--publisher-netns", cfg->publisher_netns,
                "Across a link: run the publisher and perftest's server in this network "
                "namespace (`ip netns` name); needs root and --publisher-address");
  u->add_option("--publisher-address", cfg->publisher_address,
                "The publisher's address in --publisher-netns (perftest's client connects to it)");
  u->add_flag("--json", *json, "Print one JSON object (default: a short table)");
  u->callback([cfg, json, &exit_code] {
    cfg->log = [](const std::string& line) {
      std::fprintf(stderr, "weightcast: %s\n", line.c_str());
    };
    auto r = run_ucx_benchmark(*cfg);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    if (*json) {
      std::printf("%s\n", r->dump(2).c_str());
    } else {
      std::printf("%-6s %-9s %12s %16s %14s %7s\n", "tls", "publisher", "part bytes",
                  "weightcast GB/s", "perftest GB/s", "ratio");
      for (const auto& c : (*r)["cases"]) {
        std::printf("%-6s %-9s %12llu %16.3f %14.3f %7.2f\n", c["tls"].get<std::string>().c_str(),
                    c["publisher_memory"].get<std::string>().c_str(),
                    c["part_bytes"].get<unsigned long long>(), c["weightcast_gbps"].get<double>(),
                    c["perftest_gbps"].get<double>(), c["ratio"].get<double>());
      }
    }
    exit_code = 0;
  });
}

}  // namespace
#endif

namespace {

// `bench model-delta`: one version's delta bytes for a whole synthetic MoE model, streamed.
void register_bench_model_delta(CLI::App& bench, int& exit_code) {
  auto cfg = std::make_shared<ModelDeltaBenchmarkConfig>();
  auto json = std::make_shared<bool>(false);
  auto* m = bench.add_subcommand(
      "model-delta",
      "Delta bytes of one synthetic Adam-bf16 step of a whole MoE-shaped model vs its raw bf16 "
      "bytes, tensor by tensor (CPU encoder, byte-identical to the CUDA one), with the NCCL "
      "bucket plan of the step's parts; progress on stderr");
  m->add_option("--family", cfg->family, "Model shape: qwen3-30b-a3b or glm-moe")
      ->capture_default_str()
      ->check(CLI::IsMember({"qwen3-30b-a3b", "glm-moe"}));
  m->add_option("--scale", cfg->scale,
                "Size factor of the model (1: the real shapes, e.g. 30.5 G elements for Qwen3)")
      ->capture_default_str()
      ->check(number_in<double>(kMinBenchScale, kMaxBenchScale));
  m->add_option("--density", cfg->density, "Fraction of elements the step changes")
      ->capture_default_str()
      ->check(number_in<double>(kMinBenchDensity, kMaxBenchDensity));
  m->add_option("--threads", cfg->threads, "Threads for generation, checksums and encode")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  m->add_option("--seed", cfg->seed, "Seed of the synthetic weights")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxSeed));
  m->add_option("--verify-every", cfg->verify_every,
                "Apply every Nth tensor's record (and the last) and compare with the new bytes")
      ->capture_default_str()
      ->check(number_in<uint64_t>(1, uint64_t{1} << 40));
  m->add_flag("--json", *json, "Print one JSON object (default: a short summary)");
  m->callback([cfg, json, &exit_code] {
    cfg->log = [](const std::string& line) {
      std::fprintf(stderr, "weightcast: %s\n", line.c_str());
    };
    auto r = run_model_delta_benchmark(*cfg);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    const auto& j = *r;
    if (*json) {
      std::printf("%s\n", j.dump(2).c_str());
    } else {
      std::printf("%s scale %g: %llu tensors, %llu bf16 elements (%llu bytes)\n",
                  j["family"].get<std::string>().c_str(), j["scale"].get<double>(),
                  j["tensors"].get<unsigned long long>(), j["elements"].get<unsigned long long>(),
                  j["raw_bf16_bytes"].get<unsigned long long>());
      std::printf(
          "density %.4f (measured %.4f): delta %llu bytes = %.4f of raw, %.2f bits per "
          "change\n",
          j["density"].get<double>(), j["measured_density"].get<double>(),
          j["delta_bytes"].get<unsigned long long>(), j["ratio"].get<double>(),
          j["bits_per_change"].get<double>());
      std::printf("nccl: %llu buckets of %llu bytes over %llu journal parts; %.1f s\n",
                  j["nccl_buckets"].get<unsigned long long>(),
                  j["nccl_bucket_bytes"].get<unsigned long long>(),
                  j["journal_parts"].get<unsigned long long>(), j["seconds"].get<double>());
    }
    exit_code = 0;
  });
}

}  // namespace

void register_bench_commands(CLI::App& app, int& exit_code) {
  auto* bench = app.add_subcommand("bench", "Measure weightcast against its physical references");
  bench->require_subcommand(1);
  auto cfg = std::make_shared<DeltaBenchmarkConfig>();
  auto json = std::make_shared<bool>(false);
  auto* d = bench->add_subcommand("delta",
                                  "Encode/apply a synthetic bf16 update; times are best-of-N and "
                                  "compared with a memcmp of the same bytes");
  d->add_option("--density", cfg->density, "Fraction of elements the step changes")
      ->capture_default_str()
      ->check(number_in<double>(kMinBenchDensity, kMaxBenchDensity));
  d->add_option("--elements", cfg->elements, "bf16 elements in the tensor")
      ->capture_default_str()
      ->check(number_in<uint64_t>(1, kMaxBenchTensorElements));
  d->add_option("--threads", cfg->threads, "Threads for encode and apply")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  d->add_option("--chunk-elements", cfg->chunk_elements, "Elements per chunk")
      ->capture_default_str()
      ->check(number_in<uint32_t>(kMinChunkElements, kMaxChunkElements));
  d->add_option("--repetitions", cfg->repetitions, "Runs per measurement (best is kept)")
      ->capture_default_str()
      ->check(number_in<int>(1, kMaxRepetitions));
  d->add_option("--seed", cfg->seed, "Seed of the synthetic weights")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxSeed));
  d->add_flag("--json", *json, "Print one JSON object (default: a short summary)");
  d->callback([cfg, json, &exit_code] {
    auto r = run_delta_benchmark(*cfg);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    const auto& j = *r;
    if (*json) {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("density %.4f (measured %.4f), %llu changed of %llu bf16 elements, threads %zu\n",
                  j["density"].get<double>(), j["measured_density"].get<double>(),
                  j["changed"].get<unsigned long long>(), j["elements"].get<unsigned long long>(),
                  cfg->threads);
      std::printf("size:   %.2f bits per change (an int32 index + bf16 value costs 48)\n",
                  j["bits_per_change"].get<double>());
      std::printf("encode: %.4f s = %.2fx memcmp (%.4f s); with base checksum pass %.2fx\n",
                  j["encode_s"].get<double>(), j["encode_vs_memcmp"].get<double>(),
                  j["memcmp_s"].get<double>(), j["encode_cold_vs_memcmp"].get<double>());
      std::printf("apply:  %.4f s = %.2fx memcmp; with base checksum pass %.2fx\n",
                  j["apply_s"].get<double>(), j["apply_vs_memcmp"].get<double>(),
                  j["apply_cold_vs_memcmp"].get<double>());
    }
    exit_code = 0;
  });

  auto acfg = std::make_shared<AdapterBenchmarkConfig>();
  auto* a = bench->add_subcommand("adapter",
                                  "Compact adapter publication vs all-safetensors on the GLM-like "
                                  "fixture; prints one JSON object");
  a->add_option("--dir", acfg->work_dir,
                "Work directory (default: a temp directory, removed after)");
  a->add_option("--repetitions", acfg->repetitions, "Runs per measurement (best is kept)")
      ->capture_default_str()
      ->check(number_in<int>(1, kMaxRepetitions));
  a->add_option("--threads", acfg->threads, "Threads for fingerprinting")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  a->add_option("--glm-hidden", acfg->glm_hidden, "Hidden size of the GLM-like fixture")
      ->capture_default_str()
      ->check(number_in<int>(16, 8192));
  auto json_flag = std::make_shared<bool>(true);
  a->add_flag("--json", *json_flag,
              "Accepted for symmetry with bench delta; the output is always JSON");
  a->callback([acfg, json_flag, &exit_code] {  // json_flag: the flag's storage lives on
    auto r = run_adapter_benchmark(*acfg);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    std::printf("%s\n", r->dump(2).c_str());
    exit_code = 0;
  });

  auto ccfg = std::make_shared<CoalesceBenchmarkConfig>();
  auto* co = bench->add_subcommand("coalesce",
                                   "Per-slice vs coalesced staging of packed experts (host), next "
                                   "to a plain memcpy; prints JSON");
  co->add_option("--experts", ccfg->experts,
                 "Experts in all (four packed parameters of 2-16 MiB experts)")
      ->capture_default_str()
      ->check(number_in<int>(4, 4096));
  co->add_option("--repetitions", ccfg->repetitions, "Runs per measurement (best is kept)")
      ->capture_default_str()
      ->check(number_in<int>(1, kMaxRepetitions));
  co->add_option("--threads", ccfg->threads, "Threads copying")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  auto co_json = std::make_shared<bool>(true);
  co->add_flag("--json", *co_json, "Accepted for symmetry; the output is always JSON");
  co->callback([ccfg, co_json, &exit_code] {  // co_json: the flag's storage lives on
    auto r = run_coalesce_benchmark(*ccfg);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    std::printf("%s\n", r->dump(2).c_str());
    exit_code = 0;
  });

  auto jcfg = std::make_shared<JournalBenchmarkConfig>();
  auto* jb = bench->add_subcommand(
      "journal",
      "Filesystem journal: anchor write vs raw sequential write, delta publication "
      "latency, catch-up from an anchor over N deltas");
  jb->add_option("--dir", jcfg->dir,
                 "Directory for the scratch journal (on the filesystem to measure)")
      ->capture_default_str();
  jb->add_option("--parameters", jcfg->parameters, "bf16 parameters of the synthetic model")
      ->capture_default_str()
      ->check(number_in<uint64_t>(1, kMaxBenchParameters));
  jb->add_option("--tensors", jcfg->tensors, "Tensors of the model")
      ->capture_default_str()
      ->check(number_in<uint64_t>(1, kMaxBenchTensors));
  jb->add_option("--density", jcfg->density, "Fraction of elements each step changes")
      ->capture_default_str()
      ->check(number_in<double>(kMinBenchDensity, kMaxBenchDensity));
  jb->add_option("--deltas", jcfg->deltas, "Deltas after the anchor")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxBenchDeltas));
  jb->add_option("--threads", jcfg->threads, "Encoder and reader threads")
      ->capture_default_str()
      ->check(number_in<size_t>(1, kMaxThreads));
  jb->add_flag("--zstd", jcfg->zstd, "Compress delta parts with zstd on byte planes");
  jb->add_option("--anchor-bench-bytes", jcfg->anchor_bench_bytes,
                 "Bytes for the anchor throughput part (0 skips it)")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxShardBytes));
  jb->add_option("--repetitions", jcfg->repetitions, "Runs per anchor measurement (best is kept)")
      ->capture_default_str()
      ->check(number_in<int>(1, kMaxRepetitions));
  auto jb_json = std::make_shared<bool>(true);
  jb->add_flag("--json", *jb_json, "Accepted for symmetry; the output is always JSON");
  jb->callback([jcfg, jb_json, &exit_code] {  // jb_json: the flag's storage lives on
    jcfg->log = [](const std::string& line) {
      std::fprintf(stderr, "weightcast: %s\n", line.c_str());
    };
    auto r = run_journal_benchmark(*jcfg);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    std::printf("%s\n", r->dump(2).c_str());
    exit_code = 0;
  });

  auto rcfg = std::make_shared<RanksBenchmarkConfig>();
  auto* rb = bench->add_subcommand(
      "ranks",
      "Several publisher ranks (a process each, an FSDP-like shard) publishing one journal, "
      "against one publisher of the whole model; engine ranks of two layouts reading it");
  rb->add_option("--dir", rcfg->dir, "Directory for the scratch journals")->capture_default_str();
  rb->add_option("--parameters", rcfg->parameters, "bf16 parameters of the synthetic model")
      ->capture_default_str()
      ->check(number_in<uint64_t>(1, kMaxBenchParameters));
  rb->add_option("--tensors", rcfg->tensors, "Tensors of the model")
      ->capture_default_str()
      ->check(number_in<uint64_t>(1, kMaxBenchTensors));
  rb->add_option("--ranks", rcfg->ranks, "Publisher ranks")
      ->capture_default_str()
      ->check(number_in<uint32_t>(1, 64));
  rb->add_option("--versions", rcfg->versions, "Versions: an anchor, then deltas")
      ->capture_default_str()
      ->check(number_in<uint64_t>(2, kMaxBenchDeltas));
  rb->add_option("--density", rcfg->density, "Fraction of elements each step changes")
      ->capture_default_str()
      ->check(number_in<double>(kMinBenchDensity, kMaxBenchDensity));
  rb->add_option("--piece-elements", rcfg->piece_elements,
                 "Each rank's ranges are published as range records of at most this many "
                 "elements (0: one record per range)")
      ->capture_default_str()
      ->check(number_in<uint64_t>(0, kMaxBenchParameters));
  rb->add_option("--split", rcfg->split,
                 "How the ranks share the model: flat (FSDP-like ranges across tensors) or "
                 "columns (tensor parallel: a block of columns of every tensor, boxes)")
      ->capture_default_str()
      ->check(CLI::IsMember({"flat", "columns"}));
  rb->callback([rcfg, &exit_code] {
    rcfg->log = [](const std::string& line) {
      std::fprintf(stderr, "weightcast: %s\n", line.c_str());
    };
    auto r = run_ranks_benchmark(*rcfg);
    if (!r.ok()) {
      exit_code = report(r.status());
      return;
    }
    std::printf("%s\n", r->dump(2).c_str());
    exit_code = 0;
  });

  register_bench_model_delta(*bench, exit_code);
  register_bench_group(*bench, exit_code);
#if WEIGHTCAST_HAVE_UCX
  register_bench_ucx(*bench, exit_code);
#endif
}

}  // namespace weightcast::cli
