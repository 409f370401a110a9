"""Kafka's listener security: TLS (and the principal of a client certificate) and SASL."""
