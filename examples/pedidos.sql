-- The example application's tables (outboxd-example-confirm and
-- outboxd-example-billing create the same ones if missing).
--
-- Orders that get confirmed, each confirmation writing one outbox event in the same
-- transaction (examples/orders.h).
CREATE TABLE IF NOT EXISTS pedidos (
  id             text PRIMARY KEY,
  cliente_id     text        NOT NULL,
  total_centavos bigint      NOT NULL,
  status         text        NOT NULL DEFAULT 'pendente',
  confirmado_em  timestamptz
);

-- The billing service's invoices, one per pedido.confirmado event (examples/billing.h).
-- No unique constraint on pedido_id on purpose: the inbox table is what keeps a
-- redelivered event from billing twice.
CREATE TABLE IF NOT EXISTS faturas (
  id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  pedido_id      text        NOT NULL,
  cliente_id     text,
  total_centavos bigint      NOT NULL,
  message_id     uuid        NOT NULL,
  emitida_em     timestamptz NOT NULL DEFAULT now()
);
