// The node agents' heartbeat Leases on the extender's side (kube/agent_leases.h): decoding
// (bad input names the field and changes nothing), the table's clock rules (renewals dated
// on our clock; a Lease first seen no later than its renewTime + margin), and the list/watch
// against the test API server in the real wire format.
#include "kube/agent_leases.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rapidjson/document.h"
#include "tests/testing/eventually.h"
#include "testsupport/fake_apiserver.h"

namespace gse {
namespace {

using ::testing::HasSubstr;
using testing::Eventually;
using testing::FakeApiServer;

constexpr char kNs[] = "gpu-slice-agent";

std::string LeaseJson(const std::string& name, const std::string& renew,
                      const std::string& ns = kNs, const std::string& holder = "n1/agent-x") {
  return absl::StrCat(R"({"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":")",
                      name, R"(","namespace":")", ns, R"("},"spec":{"holderIdentity":")", holder,
                      R"(","leaseDurationSeconds":60)",
                      renew.empty() ? "" : absl::StrCat(R"(,"renewTime":)", renew), "}}");
}

absl::StatusOr<std::optional<AgentLease>> Decode(const std::string& json) {
  rapidjson::Document doc;
  doc.Parse(json.c_str());
  EXPECT_FALSE(doc.HasParseError()) << json;
  return DecodeAgentLease(doc, "Lease");
}

TEST(AgentLeaseDecode, ReadsTheRecordedWireFormat) {
  auto lease = Decode(LeaseJson("gse-agent-gpu-node-1", R"("2026-11-29T10:00:00.123456Z")"));
  ASSERT_TRUE(lease.ok()) << lease.status();
  ASSERT_TRUE(lease->has_value());
  EXPECT_EQ((*lease)->node, "gpu-node-1");
  EXPECT_EQ((*lease)->holder, "n1/agent-x");
  EXPECT_EQ((*lease)->renew_time, absl::FromUnixMicros(1795946400123456));
  EXPECT_EQ(FormatLeaseTime((*lease)->renew_time), "2026-11-29T10:00:00.123456Z");
  EXPECT_EQ(AgentLeaseName("gpu-node-1"), "gse-agent-gpu-node-1");
}

TEST(AgentLeaseDecode, OtherLeasesAreNotOurs) {
  // The extender's own leader-election Lease may share the namespace.
  auto lease = Decode(LeaseJson("gpu-slice-extender", R"("2026-11-29T10:00:00.000000Z")"));
  ASSERT_TRUE(lease.ok());
  EXPECT_FALSE(lease->has_value());
}

TEST(AgentLeaseDecode, BadInputNamesTheField) {
  const struct {
    std::string json;
    std::string want;
  } cases[] = {
      {LeaseJson("gse-agent-n1", ""), "Lease.spec.renewTime: missing"},
      {LeaseJson("gse-agent-n1", "null"), "Lease.spec.renewTime: missing"},
      {LeaseJson("gse-agent-n1", "12"), "Lease.spec.renewTime: not a string"},
      {LeaseJson("gse-agent-n1", R"("yesterday")"), "Lease.spec.renewTime: \"yesterday\" is not an RFC 3339 time"},
      {LeaseJson("gse-agent-n1", R"("2026-13-45T10:00:00Z")"), "Lease.spec.renewTime"},
      {LeaseJson("gse-agent-Node_A", R"("2026-11-29T10:00:00Z")"), "Lease.metadata.name \"gse-agent-Node_A\""},
      {LeaseJson("gse-agent-", R"("2026-11-29T10:00:00Z")"), "is not a Node name"},
      {LeaseJson("gse-agent-a\\u0001b", R"("2026-11-29T10:00:00Z")"), "\"gse-agent-a?b\""},
      {R"({"metadata":{"name":"gse-agent-n1"}})", "Lease.spec: missing"},
      {R"({"metadata":{"name":7},"spec":{}})", "Lease.metadata.name: missing or not a string"},
      {R"({"metadata":{"name":"gse-agent-n1"},"spec":{"holderIdentity":3,"renewTime":"2026-11-29T10:00:00Z"}})",
       "Lease.spec.holderIdentity: not a string"},
  };
  for (const auto& c : cases) {
    auto lease = Decode(c.json);
    ASSERT_FALSE(lease.ok()) << c.json;
    EXPECT_EQ(lease.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(lease.status().message(), HasSubstr(c.want)) << c.json;
  }
  // A hostile, long name is shown cut short.
  auto lease = Decode(LeaseJson(absl::StrCat("gse-agent-", std::string(300, 'X')), R"("2026-11-29T10:00:00Z")"));
  ASSERT_FALSE(lease.ok());
  EXPECT_LT(lease.status().message().size(), 300u);
}

AgentLease Lease(const std::string& node, absl::Time renew) {
  AgentLease l;
  l.node = node;
  l.renew_time = renew;
  l.renew_text = FormatLeaseTime(renew);
  return l;
}

TEST(AgentLeaseTable, RenewalsAreChangesDatedOnOurClock) {
  const absl::Duration margin = absl::Seconds(60);
  AgentLeaseTable table(margin);
  const absl::Time t0 = absl::FromUnixSeconds(1800000000);
  EXPECT_EQ(table.LastRenewal("n1"), absl::InfinitePast()) << "nothing listed: nothing known";
  EXPECT_FALSE(table.current());
  // Agent clocks: n1 an hour ahead (renewTime in our future), n2 30 s behind, n3's Lease left
  // alone for 10 minutes (its agent died before we started).
  table.Replace({Lease("n1", t0 + absl::Hours(1)), Lease("n2", t0 - absl::Seconds(30)),
                 Lease("n3", t0 - absl::Minutes(10))},
                t0);
  EXPECT_TRUE(table.current());
  EXPECT_EQ(table.LastRenewal("n1"), t0) << "never later than received";
  EXPECT_EQ(table.LastRenewal("n2"), t0) << "a clock behind by less than the margin is fine";
  EXPECT_EQ(table.LastRenewal("n3"), t0 - absl::Minutes(9)) << "renewTime + margin";
  EXPECT_EQ(table.LastRenewal("n4"), t0) << "no Lease: since the first list";

  // A renewal is a change of renewTime, dated when we receive it, whatever it says.
  table.Apply(Lease("n1", t0 - absl::Hours(5)), t0 + absl::Seconds(20));
  EXPECT_EQ(table.LastRenewal("n1"), t0 + absl::Seconds(20));
  // The same renewTime again (a label change, a replayed event): no renewal.
  AgentLease same = Lease("n1", t0 - absl::Hours(5));
  same.holder = "n1/new-pod";
  table.Apply(same, t0 + absl::Seconds(50));
  EXPECT_EQ(table.LastRenewal("n1"), t0 + absl::Seconds(20));
  EXPECT_EQ(table.Find("n1")->holder, "n1/new-pod");
  // A relist that shows the same renewTime is no renewal either; a changed one is, now.
  table.Replace({Lease("n1", t0 - absl::Hours(5)), Lease("n2", t0 + absl::Seconds(40))},
                t0 + absl::Seconds(70));
  EXPECT_EQ(table.LastRenewal("n1"), t0 + absl::Seconds(20));
  EXPECT_EQ(table.LastRenewal("n2"), t0 + absl::Seconds(70));
  EXPECT_EQ(table.LastRenewal("n3"), t0) << "its Lease is gone: since the first list";
  table.Remove("n2");
  EXPECT_EQ(table.LastRenewal("n2"), t0);
  EXPECT_EQ(table.size(), 1u);
}

class AgentLeaseWatcherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.Start().ok());
    KubeConfig config;
    config.server = fake_.url();
    config.token = "test-token";
    client_ = std::move(*KubeClient::Create(config));
    ASSERT_TRUE(client_->CheckReachable(1, absl::Milliseconds(10)).ok());
  }

  std::unique_ptr<AgentLeaseWatcher> Watch() {
    AgentLeaseWatcherOptions o;
    o.lease_namespace = kNs;
    o.backoff_initial = absl::Milliseconds(20);
    o.log = [this](const std::string& line) {
      absl::MutexLock lock(&mu_);
      log_.push_back(line);
    };
    auto w = std::make_unique<AgentLeaseWatcher>(client_.get(), &table_, o);
    w->Start();
    return w;
  }

  std::string Logged() {
    absl::MutexLock lock(&mu_);
    std::string all;
    for (const std::string& l : log_) absl::StrAppend(&all, l, "\n");
    return all;
  }

  FakeApiServer fake_;
  std::unique_ptr<KubeClient> client_;
  AgentLeaseTable table_{absl::Seconds(60)};
  absl::Mutex mu_;
  std::vector<std::string> log_ ABSL_GUARDED_BY(mu_);
};

TEST_F(AgentLeaseWatcherTest, ListsThenWatchesRenewalsOfItsNamespaceOnly) {
  const std::string t = FormatLeaseTime(absl::Now());
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gse-agent-n1", absl::StrCat("\"", t, "\""))).ok());
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gse-agent-n9", absl::StrCat("\"", t, "\""), "elsewhere")).ok());
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gpu-slice-extender", absl::StrCat("\"", t, "\""))).ok());
  auto w = Watch();
  ASSERT_TRUE(Eventually([&] { return table_.current(); }, absl::Seconds(30)));
  EXPECT_TRUE(table_.Find("n1").has_value());
  EXPECT_FALSE(table_.Find("n9").has_value()) << "another namespace's Lease";
  EXPECT_EQ(table_.size(), 1u) << "the leader-election Lease is not an agent's";
  const absl::Time listed = table_.LastRenewal("n1");

  // The agent renews: the watch brings the change, dated on our clock.
  const std::string t2 = FormatLeaseTime(absl::Now() + absl::Seconds(1));
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gse-agent-n1", absl::StrCat("\"", t2, "\""))).ok());
  ASSERT_TRUE(Eventually([&] { return table_.Find("n1")->renew_text == t2; }, absl::Seconds(30)));
  EXPECT_GE(table_.LastRenewal("n1"), listed);
  // A new agent's Lease.
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gse-agent-n2", absl::StrCat("\"", t2, "\""))).ok());
  ASSERT_TRUE(Eventually([&] { return table_.Find("n2").has_value(); }, absl::Seconds(30)));
  // Deleted: the node's agent is gone.
  ASSERT_TRUE(fake_.Delete("leases", kNs, "gse-agent-n2"));
  ASSERT_TRUE(Eventually([&] { return !table_.Find("n2").has_value(); }, absl::Seconds(30)));
  EXPECT_EQ(w->counters().decode_errors, 0);
}

TEST_F(AgentLeaseWatcherTest, MalformedLeasesAreLoggedAndChangeNothing) {
  const std::string t = FormatLeaseTime(absl::Now());
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gse-agent-n1", absl::StrCat("\"", t, "\""))).ok());
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gse-agent-bad", R"("not a time")")).ok());
  auto w = Watch();
  ASSERT_TRUE(Eventually([&] { return table_.current(); }, absl::Seconds(30)));
  EXPECT_EQ(w->counters().decode_errors, 1);
  EXPECT_FALSE(table_.Find("bad").has_value());
  EXPECT_TRUE(table_.Find("n1").has_value()) << "one bad Lease does not block the others";
  const AgentLeaseTable::Entry before = *table_.Find("n1");

  // n1's Lease updated without a renewTime, then with a garbage one: both refused, its last
  // good renewal stands (and ages: a broken agent is not kept alive by broken writes).
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gse-agent-n1", "")).ok());
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gse-agent-n1", R"("2026-02-30T99:00:00Z")")).ok());
  ASSERT_TRUE(Eventually([&] { return w->counters().decode_errors == 3; }, absl::Seconds(30)));
  EXPECT_EQ(table_.Find("n1")->renew_text, before.renew_text);
  EXPECT_EQ(table_.Find("n1")->renewed_at, before.renewed_at);
  EXPECT_THAT(Logged(), HasSubstr("spec.renewTime: missing"));
  EXPECT_THAT(Logged(), HasSubstr("is not an RFC 3339 time"));
}

TEST_F(AgentLeaseWatcherTest, ExpiredWatchRelists) {
  auto w = Watch();
  ASSERT_TRUE(Eventually([&] { return table_.current(); }, absl::Seconds(30)));
  // A write the watch does not show (another namespace), then compaction: our last
  // resourceVersion is gone, the re-watch from it gets 410, and only a relist catches up.
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gse-agent-n9", R"("2026-11-29T10:00:00Z")", "elsewhere")).ok());
  fake_.Compact();
  fake_.DropWatches();
  ASSERT_TRUE(Eventually([&] { return w->counters().lists >= 2; }, absl::Seconds(30)));
  const std::string t = FormatLeaseTime(absl::Now());
  ASSERT_TRUE(fake_.Apply("leases", LeaseJson("gse-agent-n1", absl::StrCat("\"", t, "\""))).ok());
  ASSERT_TRUE(Eventually([&] { return table_.Find("n1").has_value(); }, absl::Seconds(30)));
}

TEST_F(AgentLeaseWatcherTest, AFailingListLeavesTheTableNotCurrent) {
  fake_.SetTokens({"another-token"});  // 401 for us
  auto w = Watch();
  ASSERT_TRUE(Eventually([&] { return w->counters().api_errors >= 2; }, absl::Seconds(30)));
  EXPECT_FALSE(table_.current()) << "nothing listed: the sweep must judge nothing";
  EXPECT_THAT(Logged(), HasSubstr("list_failed"));
}

}  // namespace
}  // namespace gse
