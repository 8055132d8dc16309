"""Portcullis killed (SIGKILL) again and again while clients write security metadata through it
(issue 7 §6, a smaller loop of the 40 kills measured there): every SCRAM credential and ACL it
acknowledged is still there after each restart, and every restart succeeds.

Eight AdminClient threads alternate AlterUserScramCredentials (a new user each time) and CreateAcls
(a new topic ACL each time), recording what Portcullis acknowledged; the node is killed every 1.5 s
and started again on the same data directory.
"""

from __future__ import annotations

import threading
import time

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from clients import confluent_conf
from conftest import _portcullis_gateway
from reauth_support import start_portcullis

pytestmark = pytest.mark.portcullis_only

WRITERS = 8
KILLS = 6


class _Writer(threading.Thread):
    def __init__(self, conf: dict, index: int, stop: threading.Event):
        super().__init__(name=f"metadata-writer-{index}", daemon=True)
        self.conf, self.index, self.stop = conf, index, stop
        self.users: list[str] = []
        self.acls: list[str] = []
        self.attempts = 0

    def run(self) -> None:
        admin = AdminClient({**self.conf, "socket.timeout.ms": 5000})
        n = 0
        while not self.stop.is_set():
            n += 1
            self.attempts += 1
            user = f"killed-{self.index}-{n}"
            topic = f"killed-topic-{self.index}-{n}"
            try:
                info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
                futures = admin.alter_user_scram_credentials(
                    [UserScramCredentialUpsertion(user, info, f"pw-{n}".encode())], request_timeout=5)
                futures[user].result(timeout=10)
                self.users.append(user)
            except (KafkaException, TimeoutError, Exception):  # noqa: BLE001 - not acknowledged
                pass
            try:
                binding = AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, f"User:{user}", "*",
                                     AclOperation.READ, AclPermissionType.ALLOW)
                admin.create_acls([binding], request_timeout=5)[binding].result(timeout=10)
                self.acls.append(topic)
            except (KafkaException, TimeoutError, Exception):  # noqa: BLE001 - not acknowledged
                pass


def test_nothing_acknowledged_is_lost_across_kills(launcher, kafka_env):
    p, _ = start_portcullis(launcher, "killed", extra_sections={"authorizer": {"super_users": ["User:alice"]}})
    gw = _portcullis_gateway("killed", p, kafka_env, "SASL_PLAINTEXT", None)
    user, password = gw.user("alice")
    conf = confluent_conf(gw, "SCRAM-SHA-512", user, password)
    stop = threading.Event()
    writers = [_Writer(conf, i, stop) for i in range(WRITERS)]
    for w in writers:
        w.start()
    restarts = 0
    try:
        for _ in range(KILLS):
            time.sleep(1.5)
            p.proc.kill()
            p.proc.wait(timeout=30)
            p.stopping = False
            p.start()  # raises if the node does not come back
            restarts += 1
        time.sleep(1.5)
    finally:
        stop.set()
        for w in writers:
            w.join(timeout=60)
    users = [u for w in writers for u in w.users]
    topics = [t for w in writers for t in w.acls]
    admin = AdminClient(conf)
    described = admin.describe_user_scram_credentials(users, request_timeout=30) if users else {}
    missing_users = []
    for u, f in (described.items() if isinstance(described, dict) else []):
        try:
            f.result(timeout=30)
        except KafkaException:
            missing_users.append(u)
    everything = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None, None,
                                  AclOperation.ANY, AclPermissionType.ANY)
    present = {b.name for b in admin.describe_acls(everything, request_timeout=30).result(timeout=60)}
    missing_acls = [t for t in topics if t not in present]
    print(f"{restarts} kills and restarts; acknowledged {len(users)} credentials and {len(topics)} ACLs "
          f"of {sum(w.attempts for w in writers)} attempts each; missing {len(missing_users)} credentials, "
          f"{len(missing_acls)} ACLs")
    assert restarts == KILLS
    assert users and topics, "nothing was acknowledged"
    assert not missing_users, missing_users[:10]
    assert not missing_acls, missing_acls[:10]
