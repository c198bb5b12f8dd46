// pgoutput messages captured from a real PostgreSQL 15.18 server (Debian 15.18-0+deb12u1),
// as hex, for the decoder tests, the fuzz corpus and the benchmark.
//
// How they were captured (scripts/pg-cluster start /tmp/pgoutput-pg; . /tmp/pgoutput-pg/env):
//   CREATE TABLE outbox (...);                      -- the default schema (src/ops/setup.cc), OID 16385
//   CREATE TYPE pedido_status AS ENUM ('novo', 'pago', 'enviado');          -- OID 16400
//   CREATE TABLE pedido (id int PRIMARY KEY, status pedido_status NOT NULL,
//                        total numeric(10,2));                              -- OID 16407
//   ALTER TABLE pedido REPLICA IDENTITY FULL;
//   CREATE TABLE cliente (id int PRIMARY KEY, nome text, notas text);       -- OID 16412
//   ALTER TABLE cliente ALTER COLUMN notas SET STORAGE EXTERNAL;
//   INSERT INTO cliente VALUES (1, 'Ana', repeat('x', 4000));  -- TOASTed, before the slot
//   CREATE PUBLICATION pub FOR TABLE outbox, pedido, cliente;
//   SELECT pg_replication_origin_create('upstream');
//   SELECT pg_create_logical_replication_slot('cap', 'pgoutput');
// then, each statement its own transaction:
//   INSERT INTO outbox (aggregate_id, tipo, payload)
//     VALUES ('pedido-42', 'pedido.confirmado', '{"pedido": 42, "total": 99.9}');
//   INSERT INTO outbox (aggregate_id, tipo, payload)
//     VALUES ('a-1', 't.x', '{"n":1}'), ('a-2', 't.x', '{"n":2}'), ('a-1', 't.y', '{"n":3}');
//   INSERT INTO pedido VALUES (7, 'novo', 10.50);
//   UPDATE pedido SET status = 'pago' WHERE id = 7;
//   DELETE FROM pedido WHERE id = 7;
//   UPDATE cliente SET nome = 'Ana Maria' WHERE id = 1;
//   UPDATE cliente SET id = 2 WHERE id = 1;
//   DELETE FROM cliente WHERE id = 2;
//   TRUNCATE pedido, cliente RESTART IDENTITY;
//   SELECT pg_logical_emit_message(true, 'prefix', 'content');
//   SELECT pg_logical_emit_message(false, 'outboxd', 'non-transactional');
//   ALTER TABLE outbox ADD COLUMN trace_id text;
//   INSERT INTO outbox (aggregate_id, tipo, payload, trace_id)
//     VALUES ('pedido-43', 'pedido.pago', '{}', 'trace-1');
//   SELECT pg_replication_origin_session_setup('upstream');
//   BEGIN;
//   SELECT pg_replication_origin_xact_setup('0/ABCDEF', '2024-01-02 03:04:05+00');
//   INSERT INTO outbox (aggregate_id, tipo, payload) VALUES ('replicado', 'r.x', '[]');
//   COMMIT;
// and read with
//   SELECT lsn, xid, encode(data, 'hex') FROM pg_logical_slot_peek_binary_changes('cap',
//     NULL, NULL, 'proto_version', '1', 'publication_names', 'pub', 'messages', 'true');
// (kInsertOutboxBinary: the same peek with 'binary', 'true' added).
// The server clock read 2026-12-02 12:28:37 UTC during the capture.
#ifndef OUTBOXD_TESTS_PGOUTPUT_CAPTURED_MESSAGES_H_
#define OUTBOXD_TESTS_PGOUTPUT_CAPTURED_MESSAGES_H_

#include <cstddef>
#include <string>
#include <string_view>

namespace outboxd::pgoutput::testing {

struct CapturedMessage {
  std::string_view name;
  std::string_view hex;
};

// "4200ff" -> "\x42\x00\xff". The constants below are well-formed; no error handling.
inline std::string FromHex(std::string_view hex) {
  auto nibble = [](char c) -> int { return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10; };
  std::string bytes(hex.size() / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    bytes[i] = static_cast<char>((nibble(hex[2 * i]) << 4) | nibble(hex[2 * i + 1]));
  }
  return bytes;
}

// Begin of the single-row outbox INSERT. slot lsn 0/153C5A8, xid 734.
inline constexpr std::string_view kBeginSingleInsert = "42000000000153c858000304a48d022f55000002de";

// Relation for outbox (10 columns). slot lsn 0/153C5A8, xid 734.
inline constexpr std::string_view kRelationOutbox =
    "52000040017075626c6963006f7574626f780064000a017365710000000014ffffffff0069640000000b86ff"
    "ffffff006167677265676174655f69640000000019ffffffff007469706f0000000019ffffffff007061796c"
    "6f61640000000edaffffffff0063726961646f5f656d00000004a0ffffffff007075626c696361646f5f656d"
    "00000004a0ffffffff0074656e746174697661730000000017ffffffff00756c74696d6f5f6572726f000000"
    "0019ffffffff0070726f78696d615f74656e7461746976615f656d00000004a0ffffffff";

// Insert of one outbox row (NULL publicado_em and ultimo_erro). slot lsn 0/153C5A8, xid 734.
inline constexpr std::string_view kInsertOutbox =
    "49000040014e000a740000000131740000002431333236373766392d633065372d346235342d393462332d36"
    "6436396162383333626566740000000970656469646f2d3432740000001170656469646f2e636f6e6669726d"
    "61646f740000001d7b22746f74616c223a2039392e392c202270656469646f223a2034327d740000001d3230"
    "32362d31322d30322031323a32383a33372e3030363130392b30306e7400000001306e740000001d32303236"
    "2d31322d30322031323a32383a33372e3030363130392b3030";

// Commit of the single-row outbox INSERT. slot lsn 0/153C888, xid 734.
inline constexpr std::string_view kCommitSingleInsert =
    "4300000000000153c858000000000153c888000304a48d022f55";

// Begin of the 3-row outbox INSERT. slot lsn 0/153C888, xid 735.
inline constexpr std::string_view kBeginMultiInsert = "42000000000153cca8000304a48d023359000002df";

// first row of the 3-row INSERT. slot lsn 0/153C888, xid 735.
inline constexpr std::string_view kInsertOutboxMulti1 =
    "49000040014e000a740000000132740000002439343131646665362d393436392d343238652d613839332d38"
    "37383538613939383937357400000003612d317400000003742e7874000000087b226e223a20317d74000000"
    "1d323032362d31322d30322031323a32383a33372e3031303931352b30306e7400000001306e740000001d32"
    "3032362d31322d30322031323a32383a33372e3031303931352b3030";

// second row. slot lsn 0/153C9E8, xid 735.
inline constexpr std::string_view kInsertOutboxMulti2 =
    "49000040014e000a740000000133740000002464663733613263302d393437392d343165322d616264612d35"
    "31343338393865646564637400000003612d327400000003742e7874000000087b226e223a20327d74000000"
    "1d323032362d31322d30322031323a32383a33372e3031303931352b30306e7400000001306e740000001d32"
    "3032362d31322d30322031323a32383a33372e3031303931352b3030";

// third row. slot lsn 0/153CB48, xid 735.
inline constexpr std::string_view kInsertOutboxMulti3 =
    "49000040014e000a740000000134740000002432333232363038612d303634382d343031302d613739642d31"
    "31623135393936363838357400000003612d317400000003742e7974000000087b226e223a20337d74000000"
    "1d323032362d31322d30322031323a32383a33372e3031303931352b30306e7400000001306e740000001d32"
    "3032362d31322d30322031323a32383a33372e3031303931352b3030";

// Commit of the 3-row INSERT. slot lsn 0/153CCD8, xid 735.
inline constexpr std::string_view kCommitMultiInsert =
    "4300000000000153cca8000000000153ccd8000304a48d023359";

// Begin of INSERT INTO pedido. slot lsn 0/153CCD8, xid 736.
inline constexpr std::string_view kBeginPedidoInsert = "42000000000153cdc0000304a48d0237de000002e0";

// Type for the enum pedido_status. slot lsn 0/153CCD8, xid 736.
inline constexpr std::string_view kTypePedidoStatus =
    "59000040107075626c69630070656469646f5f73746174757300";

// Relation for pedido (REPLICA IDENTITY FULL). slot lsn 0/153CCD8, xid 736.
inline constexpr std::string_view kRelationPedido =
    "52000040177075626c69630070656469646f006600030169640000000017ffffffff01737461747573000000"
    "4010ffffffff01746f74616c00000006a4000a0006";

// Insert into pedido. slot lsn 0/153CCD8, xid 736.
inline constexpr std::string_view kInsertPedido =
    "49000040174e000374000000013774000000046e6f766f740000000531302e3530";

// Commit. slot lsn 0/153CDF0, xid 736.
inline constexpr std::string_view kCommitPedidoInsert =
    "4300000000000153cdc0000000000153cdf0000304a48d0237de";

// Begin of UPDATE pedido. slot lsn 0/153CDF0, xid 737.
inline constexpr std::string_view kBeginPedidoUpdate = "42000000000153ce58000304a48d0242e7000002e1";

// Update with the whole old row ('O'). slot lsn 0/153CDF0, xid 737.
inline constexpr std::string_view kUpdatePedidoOldRow =
    "55000040174f000374000000013774000000046e6f766f740000000531302e35304e00037400000001377400"
    "0000047061676f740000000531302e3530";

// Commit. slot lsn 0/153CE88, xid 737.
inline constexpr std::string_view kCommitPedidoUpdate =
    "4300000000000153ce58000000000153ce88000304a48d0242e7";

// Begin of DELETE FROM pedido. slot lsn 0/153CE88, xid 738.
inline constexpr std::string_view kBeginPedidoDelete = "42000000000153ced8000304a48d024515000002e2";

// Delete with the whole old row ('O'). slot lsn 0/153CE88, xid 738.
inline constexpr std::string_view kDeletePedidoOldRow =
    "44000040174f000374000000013774000000047061676f740000000531302e3530";

// Commit. slot lsn 0/153CF08, xid 738.
inline constexpr std::string_view kCommitPedidoDelete =
    "4300000000000153ced8000000000153cf08000304a48d024515";

// Begin of UPDATE cliente SET nome. slot lsn 0/153CF40, xid 739.
inline constexpr std::string_view kBeginClienteUpdate =
    "42000000000153cfa8000304a48d024865000002e3";

// Relation for cliente (default replica identity). slot lsn 0/153CF40, xid 739.
inline constexpr std::string_view kRelationCliente =
    "520000401c7075626c696300636c69656e7465006400030169640000000017ffffffff006e6f6d6500000000"
    "19ffffffff006e6f7461730000000019ffffffff";

// Update, no old tuple, TOASTed notas unchanged ('u'). slot lsn 0/153CF40, xid 739.
inline constexpr std::string_view kUpdateClienteUnchangedToast =
    "550000401c4e00037400000001317400000009416e61204d6172696175";

// Commit. slot lsn 0/153CFD8, xid 739.
inline constexpr std::string_view kCommitClienteUpdate =
    "4300000000000153cfa8000000000153cfd8000304a48d024865";

// Begin of UPDATE cliente SET id. slot lsn 0/153D010, xid 740.
inline constexpr std::string_view kBeginClienteKeyUpdate =
    "42000000000153d0c0000304a48d024c1e000002e4";

// Update of the key: old key ('K') then new row. slot lsn 0/153D010, xid 740.
inline constexpr std::string_view kUpdateClienteOldKey =
    "550000401c4b00037400000001316e6e4e00037400000001327400000009416e61204d6172696175";

// Commit. slot lsn 0/153D0F0, xid 740.
inline constexpr std::string_view kCommitClienteKeyUpdate =
    "4300000000000153d0c0000000000153d0f0000304a48d024c1e";

// Begin of DELETE FROM cliente. slot lsn 0/153D0F0, xid 741.
inline constexpr std::string_view kBeginClienteDelete =
    "42000000000153d1d8000304a48d024efc000002e5";

// Delete with the old key ('K'). slot lsn 0/153D0F0, xid 741.
inline constexpr std::string_view kDeleteClienteOldKey = "440000401c4b00037400000001326e6e";

// Commit. slot lsn 0/153D208, xid 741.
inline constexpr std::string_view kCommitClienteDelete =
    "4300000000000153d1d8000000000153d208000304a48d024efc";

// Begin of TRUNCATE pedido, cliente RESTART IDENTITY. slot lsn 0/153E320, xid 742.
inline constexpr std::string_view kBeginTruncate = "42000000000153e350000304a48d025aa5000002e6";

// Type again (relation cache invalidated by TRUNCATE). slot lsn 0/153E320, xid 742.
inline constexpr std::string_view kTypePedidoStatusAgain =
    "59000040107075626c69630070656469646f5f73746174757300";

// Relation for pedido again. slot lsn 0/153E320, xid 742.
inline constexpr std::string_view kRelationPedidoAgain =
    "52000040177075626c69630070656469646f006600030169640000000017ffffffff01737461747573000000"
    "4010ffffffff01746f74616c00000006a4000a0006";

// Relation for cliente again. slot lsn 0/153E320, xid 742.
inline constexpr std::string_view kRelationClienteAgain =
    "520000401c7075626c696300636c69656e7465006400030169640000000017ffffffff006e6f6d6500000000"
    "19ffffffff006e6f7461730000000019ffffffff";

// Truncate of both relations. slot lsn 0/153E320, xid 742.
inline constexpr std::string_view kTruncate = "540000000202000040170000401c";

// Commit. slot lsn 0/153E558, xid 742.
inline constexpr std::string_view kCommitTruncate =
    "4300000000000153e350000000000153e558000304a48d025aa5";

// Begin of the transaction holding the transactional message. slot lsn 0/153E598, xid 743.
inline constexpr std::string_view kBeginLogicalMessage =
    "42000000000153e598000304a48d026744000002e7";

// pg_logical_emit_message(true, 'prefix', 'content'). slot lsn 0/153E598, xid 743.
inline constexpr std::string_view kLogicalMessageTransactional =
    "4d01000000000153e5987072656669780000000007636f6e74656e74";

// Commit. slot lsn 0/153E5C8, xid 743.
inline constexpr std::string_view kCommitLogicalMessage =
    "4300000000000153e598000000000153e5c8000304a48d026744";

// pg_logical_emit_message(false, 'outboxd', 'non-transactional'), no Begin/Commit. slot lsn
// 0/153E618, xid 0.
inline constexpr std::string_view kLogicalMessageNonTransactional =
    "4d00000000000153e6186f7574626f786400000000116e6f6e2d7472616e73616374696f6e616c";

// Begin of the transaction of outboxd_emit below (a later capture). slot lsn 0/1947630, xid 727.
inline constexpr std::string_view kBeginOutboxdEvent =
    "420000000001947630000304bb89ff35b2000002d7";

// SELECT outboxd_emit('pedido-77', 'pedido.confirmado', '{"totalCentavos":1000}') (the
// function `outboxd setup` installs, src/outbox/emitted_event.h): a transactional
// message whose content holds NUL separators. slot lsn 0/1947630.
inline constexpr std::string_view kLogicalMessageOutboxdEvent =
    "4d0100000000019476306f7574626f786400000000816f7574626f78642d76310039303732666436362d6438"
    "38622d343139302d383838632d6536323236393365386538340070656469646f2d37370070656469646f2e63"
    "6f6e6669726d61646f00323032362d31322d30332031353a35343a31302e3732383230302b3030007b22746f"
    "74616c43656e7461766f73223a20313030307d";

// Commit. slot lsn 0/1947660, xid 727.
inline constexpr std::string_view kCommitOutboxdEvent =
    "430000000000019476300000000001947660000304bb89ff35b2";

// Begin of the INSERT after ALTER TABLE outbox ADD COLUMN trace_id. slot lsn 0/153E990, xid 745.
inline constexpr std::string_view kBeginAlteredInsert =
    "42000000000153eaf0000304a48d026f5d000002e9";

// Relation for outbox again, same OID, 11 columns. slot lsn 0/153E990, xid 745.
inline constexpr std::string_view kRelationOutboxAltered =
    "52000040017075626c6963006f7574626f780064000b017365710000000014ffffffff0069640000000b86ff"
    "ffffff006167677265676174655f69640000000019ffffffff007469706f0000000019ffffffff007061796c"
    "6f61640000000edaffffffff0063726961646f5f656d00000004a0ffffffff007075626c696361646f5f656d"
    "00000004a0ffffffff0074656e746174697661730000000017ffffffff00756c74696d6f5f6572726f000000"
    "0019ffffffff0070726f78696d615f74656e7461746976615f656d00000004a0ffffffff0074726163655f69"
    "640000000019ffffffff";

// Insert with trace_id. slot lsn 0/153E990, xid 745.
inline constexpr std::string_view kInsertOutboxAltered =
    "49000040014e000b740000000135740000002438613665663262392d623164372d346433622d396538312d36"
    "3535393564356366613235740000000970656469646f2d3433740000000b70656469646f2e7061676f740000"
    "00027b7d740000001d323032362d31322d30322031323a32383a33372e3032363232312b30306e7400000001"
    "306e740000001d323032362d31322d30322031323a32383a33372e3032363232312b30307400000007747261"
    "63652d31";

// Commit. slot lsn 0/153EB20, xid 745.
inline constexpr std::string_view kCommitAlteredInsert =
    "4300000000000153eaf0000000000153eb20000304a48d026f5d";

// Begin of the INSERT from replication origin 'upstream'. slot lsn 0/153EB20, xid 746.
inline constexpr std::string_view kBeginWithOrigin = "42000000000153ec780002b0ec8515f340000002ea";

// Origin 'upstream', origin commit LSN 0/ABCDEF. slot lsn 0/153EB20, xid 746.
inline constexpr std::string_view kOriginUpstream = "4f0000000000abcdef757073747265616d00";

// Insert. slot lsn 0/153EB20, xid 746.
inline constexpr std::string_view kInsertOutboxWithOrigin =
    "49000040014e000b740000000136740000002463333663363936632d613535352d346330362d623531622d33"
    "353234333466633064383774000000097265706c696361646f7400000003722e7874000000025b5d74000000"
    "1c323032362d31322d30322031323a32383a33372e30323736322b30306e7400000001306e740000001c3230"
    "32362d31322d30322031323a32383a33372e30323736322b30306e";

// Commit. slot lsn 0/153ECC0, xid 746.
inline constexpr std::string_view kCommitWithOrigin =
    "4300000000000153ec78000000000153ecc00002b0ec8515f340";

// kInsertOutbox again, peeked with binary 'true' (values in send format). slot lsn 0/153C5A8, xid
// 734.
inline constexpr std::string_view kInsertOutboxBinary =
    "49000040014e000a620000000800000000000000016200000010132677f9c0e74b5494b36d69ab833bef6200"
    "00000970656469646f2d3432620000001170656469646f2e636f6e6669726d61646f620000001e017b22746f"
    "74616c223a2039392e392c202270656469646f223a2034327d6200000008000304a48d021f1d6e6200000004"
    "000000006e6200000008000304a48d021f1d";

// Every captured message, in stream order, for table-driven tests and fuzz seeds.
inline constexpr CapturedMessage kAllCapturedMessages[] = {
    {"BeginSingleInsert", kBeginSingleInsert},
    {"RelationOutbox", kRelationOutbox},
    {"InsertOutbox", kInsertOutbox},
    {"CommitSingleInsert", kCommitSingleInsert},
    {"BeginMultiInsert", kBeginMultiInsert},
    {"InsertOutboxMulti1", kInsertOutboxMulti1},
    {"InsertOutboxMulti2", kInsertOutboxMulti2},
    {"InsertOutboxMulti3", kInsertOutboxMulti3},
    {"CommitMultiInsert", kCommitMultiInsert},
    {"BeginPedidoInsert", kBeginPedidoInsert},
    {"TypePedidoStatus", kTypePedidoStatus},
    {"RelationPedido", kRelationPedido},
    {"InsertPedido", kInsertPedido},
    {"CommitPedidoInsert", kCommitPedidoInsert},
    {"BeginPedidoUpdate", kBeginPedidoUpdate},
    {"UpdatePedidoOldRow", kUpdatePedidoOldRow},
    {"CommitPedidoUpdate", kCommitPedidoUpdate},
    {"BeginPedidoDelete", kBeginPedidoDelete},
    {"DeletePedidoOldRow", kDeletePedidoOldRow},
    {"CommitPedidoDelete", kCommitPedidoDelete},
    {"BeginClienteUpdate", kBeginClienteUpdate},
    {"RelationCliente", kRelationCliente},
    {"UpdateClienteUnchangedToast", kUpdateClienteUnchangedToast},
    {"CommitClienteUpdate", kCommitClienteUpdate},
    {"BeginClienteKeyUpdate", kBeginClienteKeyUpdate},
    {"UpdateClienteOldKey", kUpdateClienteOldKey},
    {"CommitClienteKeyUpdate", kCommitClienteKeyUpdate},
    {"BeginClienteDelete", kBeginClienteDelete},
    {"DeleteClienteOldKey", kDeleteClienteOldKey},
    {"CommitClienteDelete", kCommitClienteDelete},
    {"BeginTruncate", kBeginTruncate},
    {"TypePedidoStatusAgain", kTypePedidoStatusAgain},
    {"RelationPedidoAgain", kRelationPedidoAgain},
    {"RelationClienteAgain", kRelationClienteAgain},
    {"Truncate", kTruncate},
    {"CommitTruncate", kCommitTruncate},
    {"BeginLogicalMessage", kBeginLogicalMessage},
    {"LogicalMessageTransactional", kLogicalMessageTransactional},
    {"CommitLogicalMessage", kCommitLogicalMessage},
    {"LogicalMessageNonTransactional", kLogicalMessageNonTransactional},
    {"BeginOutboxdEvent", kBeginOutboxdEvent},
    {"LogicalMessageOutboxdEvent", kLogicalMessageOutboxdEvent},
    {"CommitOutboxdEvent", kCommitOutboxdEvent},
    {"BeginAlteredInsert", kBeginAlteredInsert},
    {"RelationOutboxAltered", kRelationOutboxAltered},
    {"InsertOutboxAltered", kInsertOutboxAltered},
    {"CommitAlteredInsert", kCommitAlteredInsert},
    {"BeginWithOrigin", kBeginWithOrigin},
    {"OriginUpstream", kOriginUpstream},
    {"InsertOutboxWithOrigin", kInsertOutboxWithOrigin},
    {"CommitWithOrigin", kCommitWithOrigin},
    {"InsertOutboxBinary", kInsertOutboxBinary},
};

}  // namespace outboxd::pgoutput::testing

#endif  // OUTBOXD_TESTS_PGOUTPUT_CAPTURED_MESSAGES_H_
