"""Security, sans-IO: the authorizer (ACLs over the metadata image), SASL server mechanisms and SCRAM
credentials, and the per-connection session (principal, listener). The edge (net/) runs TLS and feeds bytes
in; the broker's handlers ask the authorizer. Never imports trio, net/ or broker/."""
