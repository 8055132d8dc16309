//! Writes the ACL corpora the authorizer benchmarks read (Rust criterion and Kafka JMH alike).
//!
//! `cargo run -p portcullis-plugin-acl --example gen_corpus -- <dir> [all|small|realistic]`
//!
//! - `kafka-<resources>-<acls>.acl`: Kafka's `AuthorizerBenchmark` shape
//!   (kafka-security-semantics §6.6) for resources ∈ {10000, 50000, 200000} × ACLs per resource
//!   ∈ {10, 50}, 20 % deny: resources `foo-bar35_resource-<i>`, every 10th a GROUP, every 5th
//!   PREFIXED; per resource `aclCount` ALLOW READ for `User:test-user`, `User:test-user1`, … on
//!   host `*`, each with a DENY twin with probability 20 %; plus a TOPIC PREFIXED
//!   `foo-bar35_resource-` with 10 per-host ACLs and a TOPIC LITERAL `*` with resources/10
//!   per-host ACLs whose hosts `127.0.0<i>` miss a dot (the benchmark's bug, kept).
//! - `realistic.acl`: 10 000 topics with a producer, two consumers and a monitor each, 2 000
//!   consumer groups, team prefixes, one prefixed DENY; the measured actions hit.
//!
//! Cases named `bench_*` are measured; every case is also compared between the two authorizers.
//! The pseudo-random deny choice is seeded, so the files are reproducible.
#![allow(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    reason = "a benchmark tool, not shipped: writing the corpus files is its job"
)]

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::Path;

use portcullis::acl::{
    AccessControlEntry, AclOperation as Op, PatternType as Pt, PermissionType as Perm,
    ResourcePattern, ResourceType as Rt,
};
use portcullis::principal::Principal;
use portcullis_plugin_acl::corpus::{Case, CaseKind, CorpusWriter};

const PREFIX: &str = "foo-bar35_resource-";
const DENY_PERCENT: u64 = 20;

/// xorshift64*: a fixed, dependency-free stream for the deny choices.
struct Rng(u64);

impl Rng {
    fn percent(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) % 100
    }
}

fn entry(principal: &str, host: &str, operation: Op, permission: Perm) -> AccessControlEntry {
    AccessControlEntry {
        principal: principal.into(),
        host: host.into(),
        operation,
        permission,
    }
}

fn authorize(name: &str, who: &str, host: &str, operation: Op, rt: Rt, resource: &str) -> Case {
    Case {
        name: name.into(),
        principal: Principal::parse(who).unwrap_or_else(|_| Principal::user(who)),
        host: host.parse().unwrap_or([127, 0, 0, 1].into()),
        kind: CaseKind::Authorize {
            operation,
            resource_type: rt,
            name: resource.into(),
        },
    }
}

fn by_type(name: &str, who: &str, host: &str, operation: Op, rt: Rt) -> Case {
    Case {
        name: name.into(),
        principal: Principal::parse(who).unwrap_or_else(|_| Principal::user(who)),
        host: host.parse().unwrap_or([127, 0, 0, 1].into()),
        kind: CaseKind::ByResourceType {
            operation,
            resource_type: rt,
        },
    }
}

fn kafka_shape(path: &Path, resources: usize, acls: usize) -> io::Result<()> {
    let mut w = CorpusWriter::new(BufWriter::new(File::create(path)?));
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (resources as u64) << 8 ^ acls as u64);
    w.comment(&format!(
        "Kafka AuthorizerBenchmark shape: resourceCount={resources} aclCount={acls} denyPercentage={DENY_PERCENT}"
    ))?;
    for case in [
        // The AuthorizerBenchmark actions.
        authorize(
            "bench_kafka_authorize",
            "User:test-user",
            "127.0.0.1",
            Op::Write,
            Rt::Topic,
            &format!("{PREFIX}95"),
        ),
        by_type(
            "bench_kafka_by_resource_type",
            "User:test-user",
            "127.0.0.2",
            Op::Read,
            Rt::Topic,
        ),
        // Decision cross-checks only.
        authorize(
            "check_read_95",
            "User:test-user",
            "127.0.0.1",
            Op::Read,
            Rt::Topic,
            &format!("{PREFIX}95"),
        ),
        authorize(
            "check_describe_95",
            "User:test-user3",
            "127.0.0.1",
            Op::Describe,
            Rt::Topic,
            &format!("{PREFIX}95"),
        ),
        authorize(
            "check_read_951",
            "User:test-user1",
            "127.0.0.1",
            Op::Read,
            Rt::Topic,
            &format!("{PREFIX}951"),
        ),
        authorize(
            "check_read_1",
            "User:test-user2",
            "127.0.0.9",
            Op::Read,
            Rt::Topic,
            &format!("{PREFIX}1"),
        ),
        authorize(
            "check_group_10",
            "User:test-user",
            "127.0.0.1",
            Op::Read,
            Rt::Group,
            &format!("{PREFIX}10"),
        ),
        authorize(
            "check_host_3",
            "User:test-user",
            "127.0.0.3",
            Op::Read,
            Rt::Topic,
            &format!("{PREFIX}x"),
        ),
        authorize(
            "check_nobody",
            "User:nobody",
            "127.0.0.1",
            Op::Read,
            Rt::TransactionalId,
            "tx",
        ),
        by_type(
            "check_by_type_write",
            "User:test-user",
            "127.0.0.1",
            Op::Write,
            Rt::Topic,
        ),
        by_type(
            "check_by_type_group",
            "User:test-user4",
            "127.0.0.1",
            Op::Read,
            Rt::Group,
        ),
        by_type(
            "check_by_type_other",
            "User:other",
            "127.0.0.1",
            Op::Read,
            Rt::Topic,
        ),
    ] {
        w.case(&case)?;
    }
    for i in 0..resources {
        let rt = if i % 10 == 0 { Rt::Group } else { Rt::Topic };
        let pt = if i % 5 == 0 {
            Pt::Prefixed
        } else {
            Pt::Literal
        };
        w.resource(&ResourcePattern::new(rt, format!("{PREFIX}{i}"), pt))?;
        for j in 0..acls {
            let principal = if j == 0 {
                "User:test-user".to_owned()
            } else {
                format!("User:test-user{j}")
            };
            w.acl(&entry(&principal, "*", Op::Read, Perm::Allow))?;
            if rng.percent() < DENY_PERCENT {
                w.acl(&entry(&principal, "*", Op::Read, Perm::Deny))?;
            }
        }
    }
    w.resource(&ResourcePattern::new(Rt::Topic, PREFIX, Pt::Prefixed))?;
    for host in 0..10 {
        let host = format!("127.0.0.{host}");
        w.acl(&entry("User:test-user", &host, Op::Read, Perm::Allow))?;
        if rng.percent() < DENY_PERCENT {
            w.acl(&entry("User:test-user", &host, Op::Read, Perm::Deny))?;
        }
    }
    w.resource(&ResourcePattern::new(Rt::Topic, "*", Pt::Literal))?;
    for host in 0..resources / 10 {
        let host = format!("127.0.0{host}");
        // Kafka skips the by-resource-type client's host so that case is not short-circuited.
        if host == "127.0.0.2" {
            continue;
        }
        w.acl(&entry("User:test-user", &host, Op::Read, Perm::Allow))?;
        if rng.percent() < DENY_PERCENT {
            w.acl(&entry("User:test-user", &host, Op::Read, Perm::Deny))?;
        }
    }
    w.finish()?;
    Ok(())
}

fn realistic(path: &Path) -> io::Result<()> {
    let mut w = CorpusWriter::new(BufWriter::new(File::create(path)?));
    w.comment("Realistic: 10000 topics, 200 applications, 2000 groups, team prefixes")?;
    let app = |i: usize| format!("User:app-{}", i % 200);
    let consumer = |i: usize| app(i * 7 + 3);
    for case in [
        authorize(
            "bench_realistic_read_hit",
            &consumer(1234),
            "10.1.2.3",
            Op::Read,
            Rt::Topic,
            "topic-1234",
        ),
        authorize(
            "bench_realistic_describe_hit",
            &app(1234),
            "10.1.2.3",
            Op::Describe,
            Rt::Topic,
            "topic-1234",
        ),
        authorize(
            "bench_realistic_miss",
            "User:app-99",
            "10.1.2.3",
            Op::Write,
            Rt::Topic,
            "topic-1234",
        ),
        by_type(
            "bench_realistic_by_resource_type",
            &app(1234),
            "10.1.2.3",
            Op::Write,
            Rt::Topic,
        ),
        authorize(
            "check_group",
            &app(42),
            "10.1.2.3",
            Op::Read,
            Rt::Group,
            "group-42",
        ),
        authorize(
            "check_team_prefix",
            "User:team3-admin",
            "10.1.2.3",
            Op::Alter,
            Rt::Topic,
            "team-3-orders",
        ),
        authorize(
            "check_prefixed_deny",
            "User:app-13",
            "10.1.2.3",
            Op::Write,
            Rt::Topic,
            "topic-913",
        ),
        authorize(
            "check_monitor",
            "User:monitor",
            "10.9.9.9",
            Op::Describe,
            Rt::Topic,
            "anything",
        ),
        authorize(
            "check_monitor_host",
            "User:monitor",
            "10.1.2.3",
            Op::Describe,
            Rt::Topic,
            "anything",
        ),
        by_type(
            "check_by_type_app13",
            "User:app-13",
            "10.1.2.3",
            Op::Write,
            Rt::Topic,
        ),
        by_type(
            "check_by_type_none",
            "User:nobody",
            "10.1.2.3",
            Op::Write,
            Rt::Topic,
        ),
    ] {
        w.case(&case)?;
    }
    for i in 0..10_000 {
        w.resource(&ResourcePattern::new(
            Rt::Topic,
            format!("topic-{i}"),
            Pt::Literal,
        ))?;
        w.acl(&entry(&app(i), "*", Op::Write, Perm::Allow))?;
        w.acl(&entry(&consumer(i), "*", Op::Read, Perm::Allow))?;
        // A second reader, unless it is the first one (Kafka's cache refuses duplicate ACLs;
        // its controller removes them before they reach the cache).
        if app(i * 13 + 5) != consumer(i) {
            w.acl(&entry(&app(i * 13 + 5), "*", Op::Read, Perm::Allow))?;
        }
        w.acl(&entry(
            "User:monitor",
            "10.9.9.9",
            Op::Describe,
            Perm::Allow,
        ))?;
    }
    for j in 0..2_000 {
        w.resource(&ResourcePattern::new(
            Rt::Group,
            format!("group-{j}"),
            Pt::Literal,
        ))?;
        w.acl(&entry(&app(j), "*", Op::Read, Perm::Allow))?;
    }
    for t in 0..20 {
        w.resource(&ResourcePattern::new(
            Rt::Topic,
            format!("team-{t}-"),
            Pt::Prefixed,
        ))?;
        w.acl(&entry(
            &format!("User:team{t}-admin"),
            "*",
            Op::All,
            Perm::Allow,
        ))?;
    }
    w.resource(&ResourcePattern::new(Rt::Topic, "topic-9", Pt::Prefixed))?;
    w.acl(&entry("User:app-13", "*", Op::Write, Perm::Deny))?;
    w.resource(&ResourcePattern::new(
        Rt::Cluster,
        "kafka-cluster",
        Pt::Literal,
    ))?;
    w.acl(&entry("User:*", "*", Op::IdempotentWrite, Perm::Allow))?;
    w.finish()?;
    Ok(())
}

fn main() -> io::Result<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().unwrap_or_else(|| "target/acl-corpus".into());
    let sizes: &[usize] = match args.next().as_deref() {
        Some("realistic") => &[],
        Some("small") => &[10_000],
        _ => &[10_000, 50_000, 200_000],
    };
    let dir = Path::new(&dir);
    std::fs::create_dir_all(dir)?;
    realistic(&dir.join("realistic.acl"))?;
    println!("{}", dir.join("realistic.acl").display());
    for &resources in sizes {
        for acls in [10, 50] {
            let path = dir.join(format!("kafka-{resources}-{acls}.acl"));
            kafka_shape(&path, resources, acls)?;
            println!("{}", path.display());
        }
    }
    Ok(())
}
