pub fn ketama_placeholder() {}
