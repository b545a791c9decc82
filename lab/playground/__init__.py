"""The playground: one task through the decision of PROTOCOL.md, shown step by step."""
