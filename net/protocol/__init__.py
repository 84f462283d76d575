"""The Kafka wire protocol, sans-IO: primitive types, message schemas and classes, frame codec.

Entry points: `net.protocol.codec` (decode_request, encode_response, encode_request, decode_response,
RequestHeader, ApiKey, SUPPORTED, FrameReader) and `net.protocol.messages` (one class per request/response).
"""
