/* Minimal JSON reader; see json_lite.h. */
#include "json_lite.h"

#include <cstdlib>

namespace twohop::rc::json {

namespace {

struct Parser {
    explicit Parser(const std::string &text) : s(text) {}

    const std::string &s;
    size_t i = 0;
    std::string err;

    int line() const {
        int l = 1;
        for (size_t k = 0; k < i && k < s.size(); ++k)
            l += s[k] == '\n';
        return l;
    }
    bool fail(const std::string &what) {
        if (err.empty())
            err = "line " + std::to_string(line()) + ": " + what;
        return false;
    }
    void ws() {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r'))
            ++i;
    }
    bool lit(const char *w) {
        size_t n = std::char_traits<char>::length(w);
        if (s.compare(i, n, w) != 0)
            return false;
        i += n;
        return true;
    }
    bool string(std::string *out) {
        if (s[i] != '"')
            return fail("expected a string");
        ++i;
        while (i < s.size() && s[i] != '"') {
            char c = s[i++];
            if (c == '\\') {
                if (i >= s.size())
                    break;
                char e = s[i++];
                c = e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
            }
            out->push_back(c);
        }
        if (i >= s.size())
            return fail("unterminated string");
        ++i;
        return true;
    }
    bool value(Value *v, int depth) {
        if (depth > 32)
            return fail("nesting too deep");
        ws();
        if (i >= s.size())
            return fail("unexpected end of input");
        char c = s[i];
        if (c == '{') {
            v->type = Value::Type::Object;
            ++i;
            ws();
            if (i < s.size() && s[i] == '}')
                return ++i, true;
            for (;;) {
                ws();
                std::string key;
                if (i >= s.size() || !string(&key))
                    return fail("expected an object key");
                ws();
                if (i >= s.size() || s[i] != ':')
                    return fail("expected ':'");
                ++i;
                if (!value(&v->obj[key], depth + 1))
                    return false;
                ws();
                if (i < s.size() && s[i] == ',') {
                    ++i;
                    continue;
                }
                if (i < s.size() && s[i] == '}')
                    return ++i, true;
                return fail("expected ',' or '}'");
            }
        }
        if (c == '[') {
            v->type = Value::Type::Array;
            ++i;
            ws();
            if (i < s.size() && s[i] == ']')
                return ++i, true;
            for (;;) {
                v->arr.emplace_back();
                if (!value(&v->arr.back(), depth + 1))
                    return false;
                ws();
                if (i < s.size() && s[i] == ',') {
                    ++i;
                    continue;
                }
                if (i < s.size() && s[i] == ']')
                    return ++i, true;
                return fail("expected ',' or ']'");
            }
        }
        if (c == '"') {
            v->type = Value::Type::String;
            return string(&v->str);
        }
        if (lit("true")) {
            v->type = Value::Type::Bool;
            v->b = true;
            return true;
        }
        if (lit("false")) {
            v->type = Value::Type::Bool;
            return true;
        }
        if (lit("null")) {
            v->type = Value::Type::Null;
            return true;
        }
        const char *start = s.c_str() + i;
        char *end = nullptr;
        v->num = std::strtod(start, &end);
        if (end == start)
            return fail(std::string("unexpected character '") + c + "'");
        v->type = Value::Type::Number;
        i += static_cast<size_t>(end - start);
        return true;
    }
};

} // namespace

const Value *Value::get(const std::string &key) const {
    if (type != Type::Object)
        return nullptr;
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &it->second;
}

bool parse(const std::string &text, Value *out, std::string *err) {
    Parser p{text};
    *out = Value{};
    if (!p.value(out, 0)) {
        *err = p.err;
        return false;
    }
    p.ws();
    if (p.i != text.size()) {
        p.fail("trailing characters after the JSON value");
        *err = p.err;
        return false;
    }
    return true;
}

std::string quote(const std::string &s) {
    std::string out = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\')
            out += '\\';
        if (c == '\n') {
            out += "\\n";
            continue;
        }
        out += c;
    }
    return out + "\"";
}

} // namespace twohop::rc::json
