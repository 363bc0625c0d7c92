/*
 * Minimal JSON reader/writer helpers for the baseline file (objects, arrays, strings, numbers,
 * true/false/null; no \u escapes beyond ASCII). Enough for files twohop-rc writes itself.
 */
#ifndef TWOHOP_RC_JSON_LITE_H
#define TWOHOP_RC_JSON_LITE_H

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace twohop::rc::json {

struct Value {
    enum class Type { Null, Bool, Number, String, Array, Object } type = Type::Null;
    bool b = false;
    double num = 0;
    std::string str;
    std::vector<Value> arr;
    std::map<std::string, Value> obj;

    const Value *get(const std::string &key) const; // nullptr if absent or not an object
};

/* Parses text; on error returns false and sets *err to "line L: <what>". */
bool parse(const std::string &text, Value *out, std::string *err);

/* Quotes and escapes s as a JSON string. */
std::string quote(const std::string &s);

} // namespace twohop::rc::json

#endif
