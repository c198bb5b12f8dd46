-- The example application's table: orders that get confirmed, each confirmation
-- writing one outbox event in the same transaction.
CREATE TABLE IF NOT EXISTS pedidos (
  id             text PRIMARY KEY,
  cliente_id     text        NOT NULL,
  total_centavos bigint      NOT NULL,
  status         text        NOT NULL DEFAULT 'pendente',
  confirmado_em  timestamptz
);
