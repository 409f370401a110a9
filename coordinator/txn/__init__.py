"""The transaction coordinator (KIP-98): a pure state machine and its
`__transaction_state` records."""
