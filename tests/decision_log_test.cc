// DecisionLog: the JSON line per bind decision that operators grep when a pod went somewhere
// unexpected. Checked: every line parses and carries every field with the decision's values;
// the levels (off / failures / all) filter as documented; hostile pod and node names cannot
// break or forge a line; the bind path of ExtenderService logs each way a bind can end exactly
// once; the binary's default log follows --decision-log and writes to stderr; concurrent
// writers never interleave lines.
#include "extender/decision_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "extender/extender_service.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "scoring/policies.h"
#include "state/assignment.h"
#include "state/catalog.h"
#include "state/k8s_objects.h"
#include "state/mirror.h"

namespace gse {
namespace {

constexpr char kShared[] = "nvidia.com/mig-1g.5gb.shared";

// Every line a DecisionLog hands to its sink.
class CapturedLines {
 public:
  DecisionLog::Sink Sink() {
    return [this](absl::string_view line) {
      absl::MutexLock lock(&mu_);
      lines_.emplace_back(line);
    };
  }
  std::vector<std::string> Lines() const {
    absl::MutexLock lock(&mu_);
    return lines_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::string> lines_ ABSL_GUARDED_BY(mu_);
};

// Parses one log line: exactly one '\n', at the end, and a JSON object before it.
rapidjson::Document ParseLine(const std::string& line) {
  rapidjson::Document doc;
  EXPECT_FALSE(line.empty());
  if (line.empty()) return doc;
  EXPECT_EQ(line.back(), '\n') << line;
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "more than one line: " << line;
  doc.Parse(line.data(), line.size() - 1);
  EXPECT_FALSE(doc.HasParseError()) << "not JSON: " << line;
  EXPECT_TRUE(doc.IsObject()) << line;
  return doc;
}

std::string Str(const rapidjson::Document& doc, const char* key) {
  if (!doc.IsObject() || !doc.HasMember(key) || !doc[key].IsString()) {
    ADD_FAILURE() << "no string member " << key;
    return "";
  }
  return std::string(doc[key].GetString(), doc[key].GetStringLength());
}

BindDecision SampleDecision() {
  BindDecision d;
  d.pod_namespace = "team-a";
  d.pod_name = "notebook-2";
  d.pod_uid = "uid-2";
  d.project = "vision";
  d.offering = kShared;
  d.node = "a100-mig-1";
  d.unit_indices = {3};
  d.amount_per_unit = 1;
  d.placement = "own_unit";
  d.outcome = "bound";
  d.latency_seconds = 0.000412;
  d.api_seconds = 0.000003;
  return d;
}

TEST(DecisionLogTest, LineCarriesEveryFieldOfTheDecision) {
  const absl::Time now = absl::FromUnixMillis(1714564800123);  // 2024-05-01T12:00:00.123Z
  rapidjson::Document doc = ParseLine(DecisionLog::FormatLine(SampleDecision(), now));
  ASSERT_TRUE(doc.IsObject());
  EXPECT_EQ(Str(doc, "ts"), "2024-05-01T12:00:00.123Z");
  EXPECT_EQ(Str(doc, "component"), "extender");
  EXPECT_EQ(Str(doc, "event"), "bind");
  EXPECT_EQ(Str(doc, "pod"), "team-a/notebook-2");
  EXPECT_EQ(Str(doc, "uid"), "uid-2");
  EXPECT_EQ(Str(doc, "project"), "vision");
  EXPECT_EQ(Str(doc, "offering"), kShared);
  EXPECT_EQ(Str(doc, "node"), "a100-mig-1");
  ASSERT_TRUE(doc["units"].IsArray());
  ASSERT_EQ(doc["units"].Size(), 1u);
  // The same unit id as the pod's annotation and /debug/state.
  EXPECT_EQ(std::string(doc["units"][0].GetString()), UnitId("a100-mig-1", kShared, 3));
  EXPECT_EQ(doc["amount"].GetInt(), 1);
  EXPECT_EQ(Str(doc, "placement"), "own_unit");
  EXPECT_EQ(Str(doc, "outcome"), "bound");
  EXPECT_EQ(Str(doc, "reason"), "");
  EXPECT_DOUBLE_EQ(doc["latency_seconds"].GetDouble(), 0.000412);
  EXPECT_DOUBLE_EQ(doc["api_seconds"].GetDouble(), 0.000003);

  // A bind that never reached the Binder has no API time: null, not a negative number.
  BindDecision refused = SampleDecision();
  refused.api_seconds = -1;
  refused.unit_indices.clear();
  refused.outcome = "quota";
  refused.reason = "binding rejected: project quota exhausted";
  doc = ParseLine(DecisionLog::FormatLine(refused, now));
  ASSERT_TRUE(doc.IsObject());
  EXPECT_TRUE(doc["api_seconds"].IsNull());
  EXPECT_EQ(doc["units"].Size(), 0u);
  EXPECT_EQ(Str(doc, "reason"), "binding rejected: project quota exhausted");
}

TEST(DecisionLogTest, DraNotesAreWrittenOnlyWhenThereAreAny) {
  const absl::Time now = absl::FromUnixSeconds(1714564800);
  BindDecision d = SampleDecision();
  EXPECT_FALSE(ParseLine(DecisionLog::FormatLine(d, now)).HasMember("dra_notes"));
  d.dra_notes = {"catalog drift: nvidia.com/gpu: DeviceClass \"gpu-whole.nvidia.com\" not found"};
  rapidjson::Document doc = ParseLine(DecisionLog::FormatLine(d, now));
  ASSERT_TRUE(doc.HasMember("dra_notes"));
  ASSERT_EQ(doc["dra_notes"].Size(), 1u);
  EXPECT_EQ(std::string(doc["dra_notes"][0].GetString()), d.dra_notes[0]);

  FilterNotes n;
  n.pod_namespace = "team-a";
  n.pod_name = "infer-1";
  n.pod_uid = "uid-1";
  n.project = "vision";
  n.offering = "nvidia.com/gpu.shared";
  n.candidates = 40;
  n.passed = 12;
  n.dra_notes = {"dra-7: no prediction: device gpu-0: counters or binding conditions are not modelled"};
  doc = ParseLine(DecisionLog::FormatLine(n, now));
  EXPECT_EQ(Str(doc, "ts"), "2024-05-01T12:00:00.000Z");
  EXPECT_EQ(Str(doc, "event"), "filter");
  EXPECT_EQ(Str(doc, "pod"), "team-a/infer-1");
  EXPECT_EQ(Str(doc, "uid"), "uid-1");
  EXPECT_EQ(Str(doc, "project"), "vision");
  EXPECT_EQ(Str(doc, "offering"), "nvidia.com/gpu.shared");
  EXPECT_EQ(doc["candidates"].GetInt(), 40);
  EXPECT_EQ(doc["passed"].GetInt(), 12);
  ASSERT_EQ(doc["dra_notes"].Size(), 1u);
  EXPECT_EQ(std::string(doc["dra_notes"][0].GetString()), n.dra_notes[0]);

  // Written at the levels that write failures, and never without a note.
  for (DecisionLogLevel level : {DecisionLogLevel::kOff, DecisionLogLevel::kFailures, DecisionLogLevel::kAll}) {
    CapturedLines captured;
    DecisionLog log(level, captured.Sink());
    log.Log(n);
    FilterNotes none = n;
    none.dra_notes.clear();
    log.Log(none);
    EXPECT_EQ(captured.Lines().size(), level == DecisionLogLevel::kOff ? 0u : 1u);
  }
}

TEST(DecisionLogTest, LevelsFilterByOutcome) {
  BindDecision bound = SampleDecision();
  BindDecision refused = SampleDecision();
  refused.outcome = "unit_taken";
  for (const auto& [level, want_bound, want_refused] :
       std::vector<std::tuple<DecisionLogLevel, bool, bool>>{
           {DecisionLogLevel::kOff, false, false},
           {DecisionLogLevel::kFailures, false, true},
           {DecisionLogLevel::kAll, true, true}}) {
    CapturedLines captured;
    DecisionLog log(level, captured.Sink());
    log.Log(bound);
    log.Log(refused);
    std::vector<std::string> lines = captured.Lines();
    ASSERT_EQ(lines.size(), static_cast<size_t>(want_bound) + static_cast<size_t>(want_refused))
        << AbslUnparseFlag(level);
    if (want_refused) {
      EXPECT_EQ(Str(ParseLine(lines.back()), "outcome"), "unit_taken");
    }
    if (want_bound) {
      EXPECT_EQ(Str(ParseLine(lines.front()), "outcome"), "bound");
    }
    EXPECT_EQ(log.Wants("bound"), want_bound);
    EXPECT_EQ(log.Wants("api_error"), want_refused);
  }
}

TEST(DecisionLogTest, FlagSyntax) {
  DecisionLogLevel level = DecisionLogLevel::kAll;
  std::string error;
  EXPECT_TRUE(AbslParseFlag("off", &level, &error));
  EXPECT_EQ(level, DecisionLogLevel::kOff);
  EXPECT_TRUE(AbslParseFlag(" Failures ", &level, &error));
  EXPECT_EQ(level, DecisionLogLevel::kFailures);
  EXPECT_TRUE(AbslParseFlag("all", &level, &error));
  EXPECT_EQ(level, DecisionLogLevel::kAll);
  EXPECT_FALSE(AbslParseFlag("verbose", &level, &error));
  EXPECT_EQ(error, "want off, failures or all");
  EXPECT_EQ(level, DecisionLogLevel::kAll) << "a rejected value must change nothing";
  for (DecisionLogLevel l :
       {DecisionLogLevel::kOff, DecisionLogLevel::kFailures, DecisionLogLevel::kAll}) {
    DecisionLogLevel back;
    EXPECT_TRUE(AbslParseFlag(AbslUnparseFlag(l), &back, &error));
    EXPECT_EQ(back, l);
  }
  // The binary's default: every decision (traceability; see decision_log.h).
  EXPECT_EQ(AbslUnparseFlag(absl::GetFlag(FLAGS_decision_log)), "all");
}

TEST(DecisionLogTest, HostileNamesAreEscapedAndCannotForgeFields) {
  BindDecision d = SampleDecision();
  // A name that tries to end the line, close the string and add its own outcome.
  d.pod_name = "evil\",\"outcome\":\"bound\"}\n{\"pod\":\"x\\\t\x01\x1f\x7f";
  d.node = "node\r\nwith\"quotes\\";
  d.reason = std::string("nul\0byte", 8);
  d.outcome = "quota";
  rapidjson::Document doc = ParseLine(DecisionLog::FormatLine(d, absl::Now()));
  ASSERT_TRUE(doc.IsObject());
  EXPECT_EQ(Str(doc, "pod"), "team-a/" + d.pod_name);
  EXPECT_EQ(Str(doc, "node"), d.node);
  EXPECT_EQ(Str(doc, "reason"), d.reason);
  EXPECT_EQ(Str(doc, "outcome"), "quota");
  EXPECT_EQ(std::string(doc["units"][0].GetString()), UnitId(d.node, kShared, 3));

  // Invalid UTF-8 (a lone continuation byte, a truncated sequence, an overlong '/', a UTF-16
  // surrogate) becomes U+FFFD; valid multi-byte characters pass unchanged.
  d.pod_name = "a\x80" "b\xE2\x82" "c\xC0\xAF" "d\xED\xA0\x80" "e\xE2\x82\xAC";
  const std::string line = DecisionLog::FormatLine(d, absl::Now());
  doc = ParseLine(line);
  ASSERT_TRUE(doc.IsObject());
  EXPECT_EQ(Str(doc, "pod"),
            "team-a/a\xEF\xBF\xBD" "b\xEF\xBF\xBD\xEF\xBF\xBD" "c\xEF\xBF\xBD\xEF\xBF\xBD"
            "d\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD" "e\xE2\x82\xAC");
  EXPECT_EQ(ValidUtf8(line), line) << "the line itself must be valid UTF-8";
}

// ---------------------------------------------------------------- through ExtenderService

std::string PodJson(const std::string& ns, const std::string& name) {
  return absl::StrCat(R"({"metadata":{"name":")", name, R"(","namespace":")", ns,
                      R"(","uid":"uid-)", name,
                      R"("},"spec":{"containers":[{"name":"c","resources":{"limits":{")", kShared,
                      R"(":"1"}}}]}})");
}

std::string FilterBody(const std::string& ns, const std::string& name) {
  return absl::StrCat(R"({"Pod":)", PodJson(ns, name), R"(,"Nodes":null,"NodeNames":["ts"]})");
}

std::string BindBody(const std::string& ns, const std::string& name) {
  return absl::StrCat(R"({"PodName":")", name, R"(","PodNamespace":")", ns, R"(","PodUID":"uid-)",
                      name, R"(","Node":"ts"})");
}

// One node "ts" with one 1g.5gb slice time-sliced 2 ways.
std::unique_ptr<Mirror> OneSliceMirror() {
  auto mirror = std::make_unique<Mirror>(std::make_shared<Catalog>(Catalog::BuiltIn()),
                                         MirrorOptions{});
  NodeObject node;
  node.name = "ts";
  node.labels["nvidia.com/mig-1g.5gb.count"] = "1";
  node.labels["nvidia.com/mig-1g.5gb.replicas"] = "2";
  node.allocatable_milli[kShared] = 2000;
  mirror->Write([&](ClusterState& s) { return s.ApplyNode(node); });
  return mirror;
}

TEST(DecisionLogTest, EveryWayABindEndsIsLoggedOnce) {
  std::unique_ptr<Mirror> mirror = OneSliceMirror();
  CapturedLines captured;
  DecisionLog log(DecisionLogLevel::kAll, captured.Sink());
  RecordOnlyBinder binder;
  ServiceOptions options;
  options.decision_log = &log;
  ExtenderService service(mirror.get(), MakePolicy("affinity-pack").value(), &binder, options);

  // a opens the slice (new_unit), b of the same project joins it (own_unit), c of another
  // project finds its one unit owned by ml-team (unit_taken).
  ASSERT_EQ(service.Filter(FilterBody("ml-team", "a")).status, 200);
  ASSERT_EQ(service.Bind(BindBody("ml-team", "a")).body, R"({"Error":""})");
  ASSERT_EQ(service.Filter(FilterBody("ml-team", "b")).status, 200);
  ASSERT_EQ(service.Bind(BindBody("ml-team", "b")).body, R"({"Error":""})");
  ASSERT_EQ(service.Filter(FilterBody("other-team", "c")).status, 200);
  ASSERT_NE(service.Bind(BindBody("other-team", "c")).body, R"({"Error":""})");
  ASSERT_NE(service.Bind(BindBody("ml-team", "never-filtered")).body, R"({"Error":""})");
  ASSERT_EQ(service.Bind("{\"PodName\": 7}").status, 400);
  service.SetReady(false);
  ASSERT_NE(service.Bind(BindBody("ml-team", "late")).body, R"({"Error":""})");
  ASSERT_EQ(service.Filter(FilterBody("ml-team", "a")).status, 200) << "filter logs nothing";

  const std::vector<std::string> lines = captured.Lines();
  ASSERT_EQ(lines.size(), 6u);
  std::vector<rapidjson::Document> docs;
  for (const std::string& line : lines) docs.push_back(ParseLine(line));
  for (const rapidjson::Document& doc : docs) {
    ASSERT_TRUE(doc.IsObject());
    for (const char* key : {"ts", "component", "event", "pod", "uid", "project", "offering",
                            "node", "units", "amount", "placement", "outcome", "reason",
                            "latency_seconds", "api_seconds"}) {
      EXPECT_TRUE(doc.HasMember(key)) << key;
    }
    EXPECT_GE(doc["latency_seconds"].GetDouble(), 0);
  }

  const std::string unit = UnitId("ts", kShared, 0);
  EXPECT_EQ(Str(docs[0], "pod"), "ml-team/a");
  EXPECT_EQ(Str(docs[0], "uid"), "uid-a");
  EXPECT_EQ(Str(docs[0], "project"), "ml-team");
  EXPECT_EQ(Str(docs[0], "offering"), kShared);
  EXPECT_EQ(Str(docs[0], "node"), "ts");
  EXPECT_EQ(Str(docs[0], "outcome"), "bound");
  EXPECT_EQ(Str(docs[0], "placement"), "new_unit");
  ASSERT_EQ(docs[0]["units"].Size(), 1u);
  EXPECT_EQ(std::string(docs[0]["units"][0].GetString()), unit);
  EXPECT_EQ(docs[0]["amount"].GetInt(), 1);
  EXPECT_TRUE(docs[0]["api_seconds"].IsNumber()) << "the Binder was called";

  EXPECT_EQ(Str(docs[1], "pod"), "ml-team/b");
  EXPECT_EQ(Str(docs[1], "placement"), "own_unit");
  EXPECT_EQ(std::string(docs[1]["units"][0].GetString()), unit);

  EXPECT_EQ(Str(docs[2], "pod"), "other-team/c");
  EXPECT_EQ(Str(docs[2], "project"), "other-team");
  EXPECT_EQ(Str(docs[2], "outcome"), "unit_taken");
  EXPECT_NE(Str(docs[2], "reason"), "");
  EXPECT_EQ(docs[2]["units"].Size(), 0u);
  EXPECT_TRUE(docs[2]["api_seconds"].IsNull());

  EXPECT_EQ(Str(docs[3], "pod"), "ml-team/never-filtered");
  EXPECT_EQ(Str(docs[3], "outcome"), "unknown_pod");
  EXPECT_EQ(Str(docs[3], "offering"), "none");

  EXPECT_EQ(Str(docs[4], "outcome"), "bad_request");
  EXPECT_EQ(Str(docs[4], "pod"), "");
  EXPECT_NE(Str(docs[4], "reason").find("PodName"), std::string::npos) << Str(docs[4], "reason");

  EXPECT_EQ(Str(docs[5], "outcome"), "not_synced");
  EXPECT_EQ(Str(docs[5], "pod"), "ml-team/late") << "named although nothing was decided";
}

TEST(DecisionLogTest, OffLevelWritesNothingFromTheService) {
  std::unique_ptr<Mirror> mirror = OneSliceMirror();
  CapturedLines captured;
  DecisionLog log(DecisionLogLevel::kOff, captured.Sink());
  RecordOnlyBinder binder;
  ServiceOptions options;
  options.decision_log = &log;
  ExtenderService service(mirror.get(), MakePolicy("affinity-pack").value(), &binder, options);
  ASSERT_EQ(service.Filter(FilterBody("ml-team", "a")).status, 200);
  ASSERT_EQ(service.Bind(BindBody("ml-team", "a")).body, R"({"Error":""})");
  ASSERT_NE(service.Bind(BindBody("ml-team", "ghost")).body, R"({"Error":""})");
  EXPECT_TRUE(captured.Lines().empty());
}

// The binary passes no DecisionLog: the service then uses DecisionLog::Default(), whose level
// is --decision-log (read at each decision) and whose lines go to stderr.
TEST(DecisionLogTest, DefaultLogFollowsTheFlagAndWritesToStderr) {
  // Restores the flag however the test ends (other tests read its default).
  struct RestoreFlag {
    DecisionLogLevel saved = absl::GetFlag(FLAGS_decision_log);
    ~RestoreFlag() { absl::SetFlag(&FLAGS_decision_log, saved); }
  } restore;
  std::unique_ptr<Mirror> mirror = OneSliceMirror();
  RecordOnlyBinder binder;
  ExtenderService service(mirror.get(), MakePolicy("affinity-pack").value(), &binder);
  ASSERT_EQ(service.Filter(FilterBody("ml-team", "a")).status, 200);
  ASSERT_EQ(service.Filter(FilterBody("ml-team", "b")).status, 200);

  absl::SetFlag(&FLAGS_decision_log, DecisionLogLevel::kFailures);
  EXPECT_EQ(DecisionLog::Default().level(), DecisionLogLevel::kFailures);
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(service.Bind(BindBody("ml-team", "a")).body, R"({"Error":""})");  // not logged
  ASSERT_NE(service.Bind(BindBody("ml-team", "ghost")).body, R"({"Error":""})");
  std::string err = ::testing::internal::GetCapturedStderr();
  std::vector<std::string> lines = absl::StrSplit(err, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u) << err;
  EXPECT_EQ(Str(ParseLine(lines[0] + "\n"), "outcome"), "unknown_pod");

  absl::SetFlag(&FLAGS_decision_log, DecisionLogLevel::kOff);
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(service.Bind(BindBody("ml-team", "b")).body, R"({"Error":""})");
  ASSERT_NE(service.Bind(BindBody("ml-team", "ghost")).body, R"({"Error":""})");
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
}

// Lines far longer than PIPE_BUF (4 KiB), which the kernel may split, written to one pipe by
// several threads at once: the reader must get every line whole.
TEST(DecisionLogTest, ConcurrentWritersNeverInterleaveLines) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::string received;
  std::thread reader([&] {
    char buf[1024];  // small reads, so that writers block on a full pipe mid-line
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) received.append(buf, static_cast<size_t>(n));
  });

  DecisionLog log(DecisionLogLevel::kAll, FdSink(fds[1]));
  constexpr int kThreads = 4;
  constexpr int kLinesPerThread = 25;
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      BindDecision d = SampleDecision();
      d.pod_name = absl::StrCat("writer-", t, "-", std::string(200, static_cast<char>('a' + t)));
      d.node = std::string(250, static_cast<char>('k' + t));
      for (int u = 0; u < 64; ++u) d.unit_indices.push_back(u);
      for (int i = 0; i < kLinesPerThread; ++i) log.Log(d);
    });
  }
  for (std::thread& w : writers) w.join();
  close(fds[1]);
  reader.join();
  close(fds[0]);

  std::vector<std::string> lines = absl::StrSplit(received, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), static_cast<size_t>(kThreads * kLinesPerThread));
  EXPECT_GT(lines[0].size(), 16000u) << "lines must exceed what a pipe writes atomically";
  for (const std::string& line : lines) {
    rapidjson::Document doc = ParseLine(line + "\n");
    ASSERT_TRUE(doc.IsObject());
    const std::string pod = Str(doc, "pod");
    const int t = pod[std::string("team-a/writer-").size()] - '0';
    ASSERT_GE(t, 0);
    ASSERT_LT(t, kThreads);
    // Every unit id of the line names the writer's own node.
    for (const auto& unit : doc["units"].GetArray()) {
      ASSERT_EQ(std::string(unit.GetString()).substr(0, 250),
                std::string(250, static_cast<char>('k' + t)));
    }
  }
}

}  // namespace
}  // namespace gse
