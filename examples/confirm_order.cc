// outboxd-example-confirm: the example application confirming orders through the
// outbox (examples/orders.h). Creates each order as pending if it does not exist,
// then confirms it; one line per order on stdout.
//
//   $ outboxd-example-confirm --pg "dbname=app" pedido-1 pedido-1
//   pedido-1 -> event 0b6f1a52-6d8c-4a39-9c1e-3f1d2a7c9e10
//   pedido-1 -> already confirmed, no event
//
// Exit codes: 0 every order handled, 1 an order failed (the others still ran),
// 2 bad flags or an unreachable database.
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "examples/password_file.h"
#include "examples/orders.h"

namespace {

using outboxd::examples::Order;

struct Flags {
  std::string pg;
  std::string pg_password_file;
  std::string customer = "cliente-1";
  int64_t total_cents = 1000;
  std::vector<std::string> orders;
};

// One order: create if missing, confirm, print what happened.
bool Handle(outboxd::pg::Connection& conn, const Flags& flags, const std::string& id) {
  absl::StatusOr<bool> created =
      outboxd::examples::CreateOrderIfMissing(conn, Order{id, flags.customer, flags.total_cents});
  absl::StatusOr<std::optional<std::string>> event =
      created.ok() ? outboxd::examples::ConfirmOrder(conn, id) : created.status();
  if (!event.ok()) {
    std::cout << id << " -> error: " << event.status().message() << std::endl;
    return false;
  }
  std::cout << id << " -> " << (*event ? "event " + **event : "already confirmed, no event")
            << std::endl;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Flags flags;
  CLI::App app{"Confirms orders: the order update and its outbox event in one transaction"};
  app.add_option("--pg", flags.pg, "PostgreSQL conninfo or URI")->required()->envname("OUTBOXD_PG");
  app.add_option("--pg-password-file", flags.pg_password_file,
                 "File holding the PostgreSQL password (kept out of argv and environment)")
      ->envname("OUTBOXD_PG_PASSWORD_FILE");
  app.add_option("--customer", flags.customer, "Customer of orders created here")
      ->capture_default_str();
  app.add_option("--total-cents", flags.total_cents, "Total of orders created here")
      ->capture_default_str();
  app.add_option("ORDER_ID", flags.orders, "Orders to confirm")->required();
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }

  absl::StatusOr<std::string> pg =
      outboxd::examples::WithPasswordFile(flags.pg, flags.pg_password_file);
  absl::StatusOr<outboxd::pg::Connection> conn =
      pg.ok() ? outboxd::pg::Connection::Open(*pg) : pg.status();
  if (!conn.ok()) {
    std::cerr << "outboxd-example-confirm: " << conn.status().message() << "\n";
    return 2;
  }
  if (absl::Status s = outboxd::examples::EnsureOrdersTable(*conn); !s.ok()) {
    std::cerr << "outboxd-example-confirm: " << s.message() << "\n";
    return 2;
  }
  bool all_ok = true;
  for (const std::string& id : flags.orders) all_ok = Handle(*conn, flags, id) && all_ok;
  return all_ok ? 0 : 1;
}
