// The built-in chat template (written for inkling.cpp), used when a checkpoint ships none.
#include "runtime/chat/chat_template.h"

namespace inkling {

namespace {

constexpr std::string_view kBuiltinTemplate = R"JINJA(
{#- inkling.cpp built-in Inkling chat template. Blocks are
    role token + optional author + content-kind token + text + <|end_message|>. -#}
{%- macro canon(value) -%}
  {{- value | tojson(ensure_ascii=false, separators=(',', ':'), sort_keys=true) -}}
{%- endmacro -%}
{%- macro effort_number(value, raw) -%}
  {%- if value < 0 or value > 0.99 -%}
    {{- raise_exception('Invalid reasoning_effort: ' ~ raw ~ '; expected none/minimal/low/medium/high/xhigh/max or a number in [0.0, 0.99]') -}}
  {%- endif -%}
  {%- set h = (value * 100) | round | int -%}
  {%- if h == 0 -%}{{- '0' -}}
  {%- elif h % 10 == 0 -%}{{- '0.' ~ ((h / 10) | int) -}}
  {%- elif h < 10 -%}{{- '0.0' ~ h -}}
  {%- else -%}{{- '0.' ~ h -}}
  {%- endif -%}
{%- endmacro -%}
{%- macro effort_text(effort) -%}
  {%- set names = {'none': '0', 'minimal': '0.1', 'low': '0.2', 'medium': '0.7', 'high': '0.9', 'xhigh': '0.99', 'max': '0.99'} -%}
  {%- if effort is string -%}
    {%- set key = effort | trim | lower -%}
    {%- if key in names -%}{{- names[key] -}}{%- else -%}{{- effort_number(key | float(-1.0), effort) -}}{%- endif -%}
  {%- else -%}
    {{- effort_number(effort | float, effort) -}}
  {%- endif -%}
{%- endmacro -%}
{%- macro role_token(role) -%}
  {%- if role == 'user' -%}<|message_user|>
  {%- elif role == 'assistant' -%}<|message_model|>
  {%- elif role == 'system' or role == 'developer' -%}<|message_system|>
  {%- elif role == 'tool' -%}<|message_tool|>
  {%- else -%}{{- raise_exception('Unknown message role: ' ~ role) -}}
  {%- endif -%}
{%- endmacro -%}
{%- macro block(role, kind, text, author='') -%}
  {{- role_token(role) ~ author ~ kind ~ text ~ '<|end_message|>' -}}
{%- endmacro -%}
{%- macro text_of(content) -%}
  {%- if content is string -%}{{- content -}}
  {%- elif content is sequence -%}
    {%- for part in content -%}
      {%- if part is string -%}{{- part -}}
      {%- elif part is mapping and part.get('text') is string -%}{{- part.get('text') -}}
      {%- endif -%}
    {%- endfor -%}
  {%- elif content is not none -%}{{- canon(content) -}}
  {%- endif -%}
{%- endmacro -%}
{%- macro effort_block() -%}
  {%- set effort = reasoning_effort if (reasoning_effort is defined and reasoning_effort is not none) else 0.9 -%}
  {{- block('system', '<|content_text|>', 'Thinking effort level: ' ~ effort_text(effort)) -}}
{%- endmacro -%}
{%- if tools is defined and tools -%}
  {{- '<|message_system|>tool_declare<|content_xml|>[' -}}
  {%- for tool in tools -%}
    {%- set fn = tool.get('function') if tool.get('function') is mapping else {} -%}
    {{- canon({'description': fn.get('description') or '', 'name': fn.get('name'), 'parameters': fn.get('parameters') or {}, 'type': tool.get('type', 'function')}) -}}
    {%- if not loop.last -%},{%- endif -%}
  {%- endfor -%}
  {{- ']<|end_message|>' -}}
{%- endif -%}
{%- set state = namespace(effort_done=false) -%}
{%- for message in messages -%}
  {%- set role = message.get('role') -%}
  {%- if not state.effort_done and role != 'system' and role != 'developer' -%}
    {{- effort_block() -}}
    {%- set state.effort_done = true -%}
  {%- endif -%}
  {%- set text = text_of(message.get('content')) -%}
  {%- if role == 'assistant' -%}
    {%- set turn = namespace(out='') -%}
    {%- if message.get('reasoning_content') is string and message.get('reasoning_content') -%}
      {%- set turn.out = turn.out ~ block('assistant', '<|content_thinking|>', message.get('reasoning_content')) -%}
    {%- endif -%}
    {%- if text -%}
      {%- set turn.out = turn.out ~ block('assistant', '<|content_text|>', text) -%}
    {%- endif -%}
    {%- for call in message.get('tool_calls') or [] -%}
      {%- set fn = call.get('function') if call.get('function') is mapping else {} -%}
      {%- if fn.get('name') is string -%}
        {%- set args = fn.get('arguments') or {} -%}
        {%- if args is mapping -%}{%- set args = canon(args) -%}
        {%- elif args is string and (args | trim)[:1] == '{' -%}{%- set args = args | trim -%}
        {%- else -%}{%- set args = '{}' -%}
        {%- endif -%}
        {%- set turn.out = turn.out ~ block('assistant', '<|content_invoke_tool_json|>', '{"name":' ~ canon(fn.get('name')) ~ ',"args":' ~ args ~ '}', fn.get('name')) -%}
      {%- endif -%}
    {%- endfor -%}
    {%- if turn.out -%}{{- turn.out ~ '<|content_model_end_sampling|>' -}}{%- endif -%}
  {%- elif role == 'tool' -%}
    {{- block('tool', '<|content_text|>', text, message.get('name') or '') -}}
  {%- elif text -%}
    {{- block(role, '<|content_text|>', text) -}}
  {%- else -%}
    {%- set checked = role_token(role) -%}
  {%- endif -%}
{%- endfor -%}
{%- if not state.effort_done -%}{{- effort_block() -}}{%- endif -%}
{%- if add_generation_prompt is defined and add_generation_prompt -%}<|message_model|>{%- endif -%}
)JINJA";

}  // namespace

std::string_view builtin_chat_template() { return kBuiltinTemplate; }

}  // namespace inkling
