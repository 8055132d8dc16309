//! A plain-text ACL corpus: an ACL set plus the authorization cases to run against it.
//!
//! The Rust benchmark (`benches/authorize.rs`), the decision dump (`examples/decide.rs`) and the
//! Java JMH harness around Kafka's StandardAuthorizer (`benches/authorizer-jmh`) all read the
//! same file, so both authorizers see the same ACLs and the same actions. One record per line,
//! fields separated by a tab (`<TAB>` below); names never contain tabs or newlines:
//!
//! ```text
//! # comment
//! resource<TAB>TOPIC<TAB>PREFIXED<TAB>foo-bar35_resource-95
//! acl<TAB>User:test-user<TAB>*<TAB>READ<TAB>ALLOW                      (for the last `resource`)
//! authorize<TAB><case><TAB>User:test-user<TAB>127.0.0.1<TAB>WRITE<TAB>TOPIC<TAB>foo-bar35_resource-95
//! by_resource_type<TAB><case><TAB>User:test-user<TAB>127.0.0.2<TAB>READ<TAB>TOPIC
//! ```
//!
//! Operation, type and permission names are Kafka's (`kafka_name()`).

use std::io::{self, BufRead, Write};
use std::net::IpAddr;

use portcullis::acl::{
    AccessControlEntry, AclBinding, AclOperation, PatternType, PermissionType, ResourcePattern,
    ResourceType,
};
use portcullis::principal::Principal;

/// What a case measures.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaseKind {
    /// `authorize()` of one action on a LITERAL resource.
    Authorize {
        /// The operation.
        operation: AclOperation,
        /// The resource type.
        resource_type: ResourceType,
        /// The resource name.
        name: String,
    },
    /// `authorize_by_resource_type()`.
    ByResourceType {
        /// The operation.
        operation: AclOperation,
        /// The resource type.
        resource_type: ResourceType,
    },
}

/// One authorization case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Case {
    /// The case's name (benchmark id).
    pub name: String,
    /// Who asks.
    pub principal: Principal,
    /// From where.
    pub host: IpAddr,
    /// What.
    pub kind: CaseKind,
}

/// A parsed corpus.
#[derive(Clone, Debug, Default)]
pub struct Corpus {
    /// Every ACL, in file order.
    pub acls: Vec<AclBinding>,
    /// Every case, in file order.
    pub cases: Vec<Case>,
}

/// A malformed corpus line.
#[derive(Debug, thiserror::Error)]
pub enum CorpusError {
    /// Reading failed.
    #[error("reading the corpus: {0}")]
    Io(#[from] io::Error),
    /// A line is malformed.
    #[error("corpus line {line}: {message}")]
    Syntax {
        /// 1-based line number.
        line: usize,
        /// What is wrong.
        message: String,
    },
}

fn field<T>(value: Option<T>, line: usize, what: &str) -> Result<T, CorpusError> {
    value.ok_or_else(|| CorpusError::Syntax {
        line,
        message: format!("bad or missing {what}"),
    })
}

/// Reads a corpus.
pub fn read(input: impl BufRead) -> Result<Corpus, CorpusError> {
    let mut corpus = Corpus::default();
    let mut resource: Option<ResourcePattern> = None;
    for (i, line) in input.lines().enumerate() {
        let line_no = i + 1;
        let line = line?;
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.split('\t');
        match f.next() {
            Some("resource") => {
                let rt = field(f.next().and_then(ResourceType::parse), line_no, "type")?;
                let pt = field(f.next().and_then(PatternType::parse), line_no, "pattern")?;
                let name = field(f.next(), line_no, "name")?;
                resource = Some(ResourcePattern::new(rt, name, pt));
            }
            Some("acl") => {
                let pattern = field(resource.clone(), line_no, "preceding resource")?;
                let principal = field(f.next(), line_no, "principal")?.to_owned();
                let host = field(f.next(), line_no, "host")?.to_owned();
                let operation = field(f.next().and_then(AclOperation::parse), line_no, "op")?;
                let permission = field(
                    f.next().and_then(PermissionType::parse),
                    line_no,
                    "permission",
                )?;
                corpus.acls.push(AclBinding {
                    pattern,
                    entry: AccessControlEntry {
                        principal,
                        host,
                        operation,
                        permission,
                    },
                });
            }
            Some(kind @ ("authorize" | "by_resource_type")) => {
                let name = field(f.next(), line_no, "case name")?.to_owned();
                let principal = field(
                    f.next().and_then(|p| Principal::parse(p).ok()),
                    line_no,
                    "principal",
                )?;
                let host = field(f.next().and_then(|h| h.parse().ok()), line_no, "host")?;
                let operation = field(f.next().and_then(AclOperation::parse), line_no, "op")?;
                let resource_type = field(f.next().and_then(ResourceType::parse), line_no, "type")?;
                let kind = if kind == "authorize" {
                    CaseKind::Authorize {
                        operation,
                        resource_type,
                        name: field(f.next(), line_no, "resource name")?.to_owned(),
                    }
                } else {
                    CaseKind::ByResourceType {
                        operation,
                        resource_type,
                    }
                };
                corpus.cases.push(Case {
                    name,
                    principal,
                    host,
                    kind,
                });
            }
            _ => {
                return Err(CorpusError::Syntax {
                    line: line_no,
                    message: "unknown record".into(),
                })
            }
        }
    }
    Ok(corpus)
}

/// Writes a corpus line by line (the large corpora never sit in memory).
#[derive(Debug)]
pub struct CorpusWriter<W: Write> {
    out: W,
}

impl<W: Write> CorpusWriter<W> {
    /// Wraps `out` (buffer it).
    pub fn new(out: W) -> Self {
        Self { out }
    }

    /// A comment line.
    pub fn comment(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.out, "# {text}")
    }

    /// Starts a resource; the following [`CorpusWriter::acl`] calls belong to it.
    pub fn resource(&mut self, pattern: &ResourcePattern) -> io::Result<()> {
        writeln!(
            self.out,
            "resource\t{}\t{}\t{}",
            pattern.resource_type, pattern.pattern_type, pattern.name
        )
    }

    /// An ACL of the current resource.
    pub fn acl(&mut self, entry: &AccessControlEntry) -> io::Result<()> {
        writeln!(
            self.out,
            "acl\t{}\t{}\t{}\t{}",
            entry.principal, entry.host, entry.operation, entry.permission
        )
    }

    /// A case.
    pub fn case(&mut self, case: &Case) -> io::Result<()> {
        match &case.kind {
            CaseKind::Authorize {
                operation,
                resource_type,
                name,
            } => writeln!(
                self.out,
                "authorize\t{}\t{}\t{}\t{}\t{}\t{}",
                case.name, case.principal, case.host, operation, resource_type, name
            ),
            CaseKind::ByResourceType {
                operation,
                resource_type,
            } => writeln!(
                self.out,
                "by_resource_type\t{}\t{}\t{}\t{}\t{}",
                case.name, case.principal, case.host, operation, resource_type
            ),
        }
    }

    /// Flushes and returns the writer.
    pub fn finish(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let mut w = CorpusWriter::new(Vec::new());
        let pattern = ResourcePattern::new(ResourceType::Topic, "t-1", PatternType::Prefixed);
        let entry = AccessControlEntry {
            principal: "User:a".into(),
            host: "*".into(),
            operation: AclOperation::DescribeConfigs,
            permission: PermissionType::Deny,
        };
        let case = Case {
            name: "c".into(),
            principal: Principal::user("a"),
            host: "127.0.0.1".parse().unwrap(),
            kind: CaseKind::Authorize {
                operation: AclOperation::Write,
                resource_type: ResourceType::TransactionalId,
                name: "t-1x".into(),
            },
        };
        w.comment("x").unwrap();
        w.resource(&pattern).unwrap();
        w.acl(&entry).unwrap();
        w.case(&case).unwrap();
        let bytes = w.finish().unwrap();
        let corpus = read(&bytes[..]).unwrap();
        assert_eq!(corpus.acls, vec![AclBinding { pattern, entry }]);
        assert_eq!(corpus.cases, vec![case]);
        assert!(read(&b"acl\tUser:a\t*\tREAD\tALLOW\n"[..]).is_err());
    }
}
